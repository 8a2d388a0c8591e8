"""`kvdoctor report`: the capacity review built from recordings, a Prometheus or the daemon's own history."""
