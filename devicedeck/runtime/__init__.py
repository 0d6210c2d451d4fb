"""What the running service does besides answering requests: its background tasks and the
leader lock that decides who runs them, webhook delivery and Prometheus metrics."""
