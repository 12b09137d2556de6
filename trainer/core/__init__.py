"""What every other package stands on: user errors and exit statuses, settings, object storage, progress,
process groups, strict JSON, PyPI downloads, the Hub reached or not, the progress watchdog, MLflow tracking."""
