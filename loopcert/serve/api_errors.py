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
    # pydantic names the union member it tried ("list[int]", "str"): not a field
    parts = [p for p in parts if not (p.startswith(("list[", "str", "int", "float", "dict[")))]
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
    if kind == "model_attributes_type" or kind == "dict_type":
        return param, f"{param}: the request body must be a JSON object"
    return param, f"{param}: {err.get('msg')} (got {err.get('input')!r})"


def install(app) -> None:
    @app.exception_handler(APIError)
    async def _api(_req: Request, e: APIError):
        return JSONResponse(body(e.message, e.param, e.kind, e.code), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, e: RequestValidationError):
        errs = list(e.errors())
        # a union prompt yields one error per member: report the first field, all messages
        param, message = validation_message(errs[0]) if errs else ("body", "invalid request")
        return JSONResponse(body(message, param, "invalid_request_error"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, e: StarletteHTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(body(str(e.detail), None, kind), status_code=e.status_code)
