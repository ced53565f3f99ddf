"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}.

Every error a client can cause is an HTTP 4xx whose `param` names the offending field
("temperature", "prompt.1", "body" for malformed JSON); the server goes on serving others.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code


def body(message: str, param: str | None, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _loc(loc) -> str:
    parts = [str(x) for x in loc if x != "body"]
    # pydantic names the union member it tried ("list[int]", "str", a model's class name such as
    # "SGLangSampling"): not a field (every field name is lower case)
    tags = ("str", "int", "float", "bool", "none")
    parts = [p for p in parts if not (p in tags or p.startswith(("list[", "dict[")) or p[:1].isupper())]
    return ".".join(parts) or "body"


def validation_message(err: dict) -> tuple[str, str]:
    param = _loc(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "json_invalid":
        return "body", f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
    if kind == "extra_forbidden":
        return param, f"unknown field {param!r}"
    if kind == "missing":
        return param, f"{param} is required"
    if kind == "model_attributes_type" or kind == "dict_type" or kind == "model_type":
        what = "the request body" if param == "body" else param
        return param, f"{what} must be a JSON object"
    if kind == "finite_number":  # JSON NaN / Infinity: Python's json reads them as floats
        return param, f"{param} must be a finite number, got {err.get('input')!r}"
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    return param, f"{param}: {msg} (got {err.get('input')!r})"


def install(app) -> None:
    @app.exception_handler(APIError)
    async def _api(_req: Request, e: APIError):
        return JSONResponse(body(e.message, e.param, e.kind, e.code), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, e: RequestValidationError):
        # a union yields one error per member: report the deepest (a list member's bad item, not
        # the dict member's "not an object"), the first of equals
        errs = sorted(e.errors(), key=lambda err: -len(err.get("loc", ())))
        param, message = validation_message(errs[0]) if errs else ("body", "invalid request")
        return JSONResponse(body(message, param, "invalid_request_error"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, e: StarletteHTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(body(str(e.detail), None, kind), status_code=e.status_code)
