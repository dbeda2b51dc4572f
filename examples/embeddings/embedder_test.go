package embeddings

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot
}

func TestEmbedderIsDeterministicNormalisedAndTopical(t *testing.T) {
	m, err := Load(context.Background(), ModelName, -1)
	require.NoError(t, err)
	e := m.(*Embedder)
	require.EqualValues(t, Buckets*Dim*4, e.Size(), "the load allocates the projection table")
	other, err := Load(context.Background(), ModelName, -1)
	require.NoError(t, err)
	v := e.Embed("the telescope saw a comet")
	require.Len(t, v, Dim)
	require.Equal(t, v, other.(*Embedder).Embed("the telescope saw a comet"), "deterministic across loads")
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	require.InDelta(t, 1.0, math.Sqrt(norm), 1e-5)

	docs := Corpus(200, 7)
	var same, diff []float64
	for i := 1; i < len(docs); i++ {
		c := cosine(e.Embed(docs[0].Body), e.Embed(docs[i].Body))
		if docs[i].Label == docs[0].Label {
			same = append(same, c)
		} else {
			diff = append(diff, c)
		}
	}
	require.NotEmpty(t, same)
	require.Greater(t, mean(same), mean(diff)+0.2, "documents of one topic are closer")
	require.NoError(t, e.Close())
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
