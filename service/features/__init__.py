"""Features attach themselves to the node: each module here has `attach(services)`, which
adds its registries, recovery steps, approval hooks and closers to `Services`."""
