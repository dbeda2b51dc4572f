-- The example's tables, apart from the engine's: the engine works without pgvector.
create extension if not exists vector;
create schema if not exists pgrun_examples;
create table pgrun_examples.documents (
  corpus     text not null,
  id         bigint not null,
  body       text not null,
  label      text not null,
  embedding  vector(384),
  primary key (corpus, id)
);
create index documents_embedding_idx on pgrun_examples.documents
  using hnsw (embedding vector_cosine_ops);
create table pgrun_examples.reports (
  corpus      text primary key,
  report      jsonb not null,
  created_at  timestamptz not null default now()
);
