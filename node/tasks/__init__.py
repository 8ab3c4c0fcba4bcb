"""The leader's periodic tasks: lease expiry and retention GC (they decide; apply only re-checks)."""
