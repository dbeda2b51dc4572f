// Package embeddings is an example of GPU-style work on pgrun: a text embedder kept
// warm in the runner's model cache, jobs that embed batches of documents into a
// pgvector column with an HNSW index, a KNN evaluation in SQL, and the workflow that
// ties them together (what `runner demo` runs).
//
// The embedder is deterministic feature hashing: each word is hashed to one of
// Buckets rows of a fixed random projection, and a document's vector is the
// L2-normalised sum of its words' rows (384 dimensions). Loading it allocates the
// projection table, so it behaves like a real model in the cache: it takes time
// and memory to load and is worth keeping warm.
package embeddings

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pgrun/pgrun/gpu"
)

// Dim is the embedding width, as in many small sentence-embedding models.
const Dim = 384

// ModelName is the name jobs give to use this embedder.
const ModelName = "hash-384"

// Buckets is how many hashed word rows the projection table holds.
const Buckets = 8192

// Embedder is a loaded embedding model.
type Embedder struct {
	table []float32 // Buckets rows of Dim weights
}

// Load builds the embedder (the projection table is seeded, so every load is the
// same model). It is a gpu.Loader; device is ignored: this model runs on the CPU.
func Load(_ context.Context, name string, _ int) (gpu.Model, error) {
	rng := rand.New(rand.NewPCG(0x9e3779b97f4a7c15, uint64(len(name))))
	t := make([]float32, Buckets*Dim)
	for i := range t {
		t[i] = float32(rng.NormFloat64())
	}
	return &Embedder{table: t}, nil
}

// Size is the projection table's memory.
func (e *Embedder) Size() int64 { return int64(len(e.table)) * 4 }

// Close drops the table.
func (e *Embedder) Close() error { e.table = nil; return nil }

// Embed returns the L2-normalised embedding of text.
func (e *Embedder) Embed(text string) []float32 {
	v := make([]float32, Dim)
	for _, w := range strings.Fields(strings.ToLower(text)) {
		h := fnv.New64a()
		h.Write([]byte(w))
		row := e.table[int(h.Sum64()%Buckets)*Dim:][:Dim]
		for i, x := range row {
			v[i] += x
		}
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range v {
			v[i] *= inv
		}
	}
	return v
}
