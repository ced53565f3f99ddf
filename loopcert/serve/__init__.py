"""`loopcert serve`: fastdec behind an OpenAI-compatible completions API.

schema.py     the request as pydantic models (strict: unknown fields and bad values are 400s)
api_errors.py OpenAI-style error bodies naming the field
scheduler.py  the batching scheduler: one decode thread, rounds through generate_batch
app.py        the FastAPI routes: /v1/completions (JSON or SSE), /v1/models, /health
loadtest.py   a bounded loopback load test (32 clients x 30 s by default)
process.py    a `loopcert serve` subprocess on a free port (the load test's and the tests' server)
load_run.py   `loopcert bench --serve-load`: the load test beside the same decoder in process

FastAPI and uvicorn are an optional extra (`pip install 'loopcert[serve]'`): nothing here is
imported unless the serve command runs.
"""
