"""Model families, one module per Hugging Face ``model_type`` (plus shared init): each assembles
mixers and layers into a `CausalLM`, defines its ``init_weights`` and re-exports the ``PRESETS``
kept, torch-free, in the module of the same name under `radixflow.models.presets`."""
