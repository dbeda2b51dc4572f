package embeddings

import "encoding/json"

// WorkflowName is the name the demo defines the workflow under.
const WorkflowName = "embeddings-demo"

// Workflow is the demo pipeline: ingest a corpus, embed it in batches on the gpu
// queue (one job per batch, fanned out by a map node), evaluate KNN, write a report.
var Workflow = json.RawMessage(`{"nodes": [
  {"name": "ingest", "kind": "embeddings.ingest",
   "args": {"docs": {"$from": "input.docs"}, "batch": {"$from": "input.batch"}, "seed": {"$from": "input.seed"}}},
  {"name": "embed", "kind": "embeddings.embed", "queue": "gpu", "model": "hash-384", "deps": ["ingest"],
   "map": {"$from": "ingest.output.batches"}, "args": {"batch": {"$from": "item"}}, "failure_ratio": 0.1},
  {"name": "knn", "kind": "embeddings.knn", "deps": ["embed"],
   "args": {"corpus": {"$from": "ingest.output.corpus"}, "queries": {"$from": "input.queries"}, "k": {"$value": 10}}},
  {"name": "report", "kind": "embeddings.report", "deps": ["knn"],
   "args": {"corpus": {"$from": "ingest.output.corpus"}, "docs": {"$from": "ingest.output.docs"},
            "batches": {"$from": "embed.output"}, "knn": {"$from": "knn.output"}}}
]}`)
