"""Adapters on Hugging Face's tokenizers library: any model's ``tokenizer.json``."""
