"""`radixflow experiment CONFIG.toml`: frozen experiments → results.json, report.md and plots."""
