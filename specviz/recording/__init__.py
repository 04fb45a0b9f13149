"""The recording format (schema.py; split by job next) and a run's records as the CLI's JSON (record_json.py)."""
