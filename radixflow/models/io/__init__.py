"""Getting weights and tokenizers in and out: safetensors checkpoints, Hub name conversion, GGUF."""
