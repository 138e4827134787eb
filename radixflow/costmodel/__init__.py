"""Cost model of a worker call: layer kinds, model shapes, hardware profiles, fitting. No torch."""
