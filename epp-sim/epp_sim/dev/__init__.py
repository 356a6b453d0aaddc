"""The local data plane for development and tests: Envoy, child processes, the `epp dev` stack."""
