"""What one kernel call costs on one GPU: measured tables, their interpolation, the roofline, the registry."""
