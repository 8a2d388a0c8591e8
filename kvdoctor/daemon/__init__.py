"""The daemon: scheduled scrape + evaluation cycles, shared state, and the sinks that read it."""
