"""What a round costs: kernel by kernel, or by fitted per-term rates, as a breakdown by term."""
