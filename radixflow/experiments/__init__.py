"""`radixflow experiment CONFIG.toml`: frozen experiments → results.json, report.md and plots."""

# cells one config may expand to unless `--max-cells` says more; here, with nothing imported, so
# `radixflow --help` states it (cli/commands.py) without importing the experiment machinery
MAX_CELLS = 10_000
