"""Speaker labels: ``embedder`` turns a segment into a voice embedding, ``tracker`` clusters a session's
embeddings online into labels and re-clusters them when the session stops."""
