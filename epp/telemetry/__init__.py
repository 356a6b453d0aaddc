"""Logs and Prometheus metrics of the picker itself."""
