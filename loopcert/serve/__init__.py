"""`loopcert serve`: fastdec behind an OpenAI-compatible completions API.

schema.py     the request as pydantic models (strict: unknown fields and bad values are 400s)
sglang.py     SGLang's native API: /generate and /get_model_info (request model, mapping, answers)
served.py     Served: the model, decoder and scheduler every route answers from
intake.py     what both APIs share: prompt ids, context and capacity checks, the sampling law
api_errors.py OpenAI-style error bodies naming the field
auth.py       --api-key: Bearer authentication on every route but /health
limits.py     --max-body-bytes and --read-timeout: bounded bodies, and timeouts uvicorn lacks
scheduler.py  the batching scheduler: one decode thread, rounds through generate_batch
app.py        the FastAPI routes: /v1/completions (JSON or SSE), /v1/models, /health, /generate
loadtest.py   a bounded loopback load test (32 clients x 30 s by default)
process.py    a `loopcert serve` subprocess on a free port (the load test's and the tests' server)
load_run.py   `loopcert bench --serve-load`: the load test beside the same decoder in process

FastAPI and uvicorn are an optional extra (`pip install 'loopcert[serve]'`): nothing here is
imported unless the serve command runs (this file holds the limits' defaults, which the
command's flags need without the extra).
"""

MAX_BODY_BYTES = 4 * 2**20  # --max-body-bytes: a batch of full-context token-id prompts is far smaller
READ_TIMEOUT_S = 30.0  # --read-timeout: for a request's headers, and then for its body
