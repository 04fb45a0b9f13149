"""A run on disk: the recording's file format (docs/recording-format.md) and a run's records as the CLI prints them.
The modules, bottom up (no cycles; none imports streamlit or transformers):
  schema        the format: FORMAT, VERSION, the limits, RecordingError, the pydantic models (Recording, RecordedRun,
                Environment) and the rules their validators apply (check_label, check_record), json_schema
  build         writing: recorded_run, build_recording, now_utc, dumps, save_recording
  field_checks  every text, number and key of a parsed file against rules compiled from the schema (check_fields)
  load          reading an untrusted file: load_recording, read_recording (size, JSON, format and version, fields,
                then pydantic), MAX_BYTES
  record_json   a run's records as `specviz generate --json` prints them (step_to_json)
Import each name from the module that defines it; this package re-exports nothing.
"""
