"""The `kdelay` command line and what it is built from: one module per command (dump_log,
dump_index, verify + verify_index, stats, rebuild_index), the shared scanning and report
types (scanning), output formatting, the progress bar, and the demo. Everything but
rebuild-index only reads."""
