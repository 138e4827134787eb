"""The zoo's preset configs: the ``config.json`` dicts each family's ``-tiny`` / ``-small`` model is
built from, one module per family module. Plain data, no torch, so a preset's shape can be read
(the sim costs a zoo name by it) without importing the model code."""
