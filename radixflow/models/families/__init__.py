"""Model families, one module per Hugging Face ``model_type`` (plus shared presets/init): each
assembles mixers and layers into a `CausalLM` and defines its ``PRESETS`` and ``init_weights``."""
