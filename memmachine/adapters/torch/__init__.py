"""PyTorch (the gpu extra): sentence-transformers embeddings and the cross-encoder reranker."""
