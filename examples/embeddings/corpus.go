package embeddings

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// topics are the labels of the synthetic corpus; each has its own vocabulary.
var topics = []string{"astronomy", "cooking", "finance", "medicine", "music", "sailing", "gardening", "chess"}

// vocabulary returns a topic's words: distinct made-up terms, so topics separate.
func vocabulary(topic string) []string {
	words := make([]string, 40)
	for i := range words {
		words[i] = fmt.Sprintf("%s%02d", topic[:4], i)
	}
	return words
}

var common = strings.Fields("the a of and to in is it that for on with as was at by this from or be are an")

// Document is one synthetic document.
type Document struct {
	ID    int64
	Body  string
	Label string
}

// Corpus makes n documents, deterministic for seed: each is 30 words, about 70%
// from its topic's vocabulary and the rest common words.
func Corpus(n int, seed uint64) []Document {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	docs := make([]Document, n)
	for i := range docs {
		topic := topics[rng.IntN(len(topics))]
		vocab := vocabulary(topic)
		words := make([]string, 30)
		for w := range words {
			if rng.Float64() < 0.7 {
				words[w] = vocab[rng.IntN(len(vocab))]
			} else {
				words[w] = common[rng.IntN(len(common))]
			}
		}
		docs[i] = Document{ID: int64(i + 1), Body: strings.Join(words, " "), Label: topic}
	}
	return docs
}
