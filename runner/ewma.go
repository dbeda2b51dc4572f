package runner

import "math"

// ewma is an exponentially weighted moving average; zero until the first sample.
type ewma struct{ v float64 }

// ewmaWeight is the weight of a new sample: about the last twenty count.
const ewmaWeight = 0.05

func (a *ewma) add(x float64) {
	if a.v == 0 {
		a.v = x
		return
	}
	a.v += ewmaWeight * (x - a.v)
}

// addN adds n samples of x at once: the same average as n calls of add.
func (a *ewma) addN(x float64, n int) {
	if n <= 0 {
		return
	}
	if a.v == 0 {
		a.v, n = x, n-1
	}
	a.v += (1 - math.Pow(1-ewmaWeight, float64(n))) * (x - a.v)
}

func (a *ewma) value() float64 { return a.v }
