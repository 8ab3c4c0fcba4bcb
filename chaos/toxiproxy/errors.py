"""API errors with Toxiproxy's messages and status codes."""

from __future__ import annotations


class ApiError(Exception):
    """An error the HTTP API reports as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def joined(self, detail: str) -> ApiError:
        """The same kind of error with a detail appended, as Toxiproxy words them."""
        return ApiError(f"{self.message}: {detail}", self.status)

    def to_json(self) -> dict[str, object]:
        return {"error": self.message, "status": self.status}


# Messages are Toxiproxy's own, so clients that match on them keep working.
BAD_REQUEST_BODY = ApiError("bad request body", 400)
MISSING_FIELD = ApiError("missing required field", 400)
PROXY_NOT_FOUND = ApiError("proxy not found", 404)
PROXY_ALREADY_EXISTS = ApiError("proxy already exists", 409)
INVALID_STREAM = ApiError("stream was invalid, can be either upstream or downstream", 400)
INVALID_TOXIC_TYPE = ApiError("invalid toxic type", 400)
TOXIC_ALREADY_EXISTS = ApiError("toxic already exists", 409)
TOXIC_NOT_FOUND = ApiError("toxic not found", 404)
