"""Where a study keeps things: Optuna storages and their URLs, engine artifacts, the cache, the timing locks."""
