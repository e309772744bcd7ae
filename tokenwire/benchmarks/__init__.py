"""tokenwire's benchmarks, importable so that `tokenwire bench` works from an installed package.

  harness  measurement (interleaved rounds, median and spread), machine description, JSON, tables
  data     seeded, realistic token streams
  core     as_tokens / tolist against numpy and array.array (the issue-2 targets)
  msgspec_json  TokenVector through msgspec hooks / out-of-band frames / base64 JSON against
           list[int] (the issue-11 targets; `tokenwire bench-msgspec`)
"""
