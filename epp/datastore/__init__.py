"""The picker's view of its pool: pool spec, endpoints of Ready pods, objectives and rewrites."""
