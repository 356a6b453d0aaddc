"""Request control: what the ext_proc layer calls to turn a parsed request into a routing decision."""
