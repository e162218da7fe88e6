"""Every REST request the bot sends: routed by the OpenAPI paths, authenticated, its body read (JSON or multipart)
and validated with its parameters against Discord's schemas, answered as Discord answers; the fake's own answers
are checked against the documented response schemas."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from aiohttp import BodyPartReader, web

from standins.discord_gateway.openapi import OpenAPI, Operation, openapi
from standins.discord_gateway.protocol import API_PREFIX, JSON_CONTENT_TYPE, QUERY_BOOLEAN_LITERALS
from standins.discord_gateway.records import IncomingRequest, InvalidRequest, InvalidResponse, Rejection, json_response
from standins.discord_gateway.schema_errors import collect_errors, insert_error, merge_errors

log = logging.getLogger(__name__)


class RestPipeline:
    """The fake's HTTP plumbing, with what it rejected, did not implement or crashed on recorded."""

    async def _rest_handler(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.path
        if not raw_path.startswith(API_PREFIX + "/"):
            return self._not_implemented(request.method, raw_path)
        path = raw_path[len(API_PREFIX) :]
        shown_path = path + (f"?{request.query_string}" if request.query_string else "")
        api = openapi()
        matched = api.match(request.method, path)
        if matched is None or matched[0].key not in self._handlers:
            return self._not_implemented(request.method, path)
        op, params = matched

        if path.startswith(self._bot_auth_prefixes) and not request.headers.get("Authorization", "").startswith("Bot "):
            return json_response({"message": "401: Unauthorized", "code": 0}, 401)
        if request.headers.get("Authorization", "").removeprefix("Bot ") in self.refused_tokens:
            return json_response({"message": "401: Unauthorized", "code": 0}, 401)

        body, files, problem = await self._read_body(request)
        incoming = IncomingRequest(request.method, shown_path, params, request.query, body, files, op)
        if problem is not None:
            return self._reject(incoming, Rejection(400, "Invalid Form Body", 50035, {}, [problem]))
        errors, problems = self._validate_request(api, incoming, request.content_type)
        if problems:
            return self._reject(incoming, Rejection(400, "Invalid Form Body", 50035, errors, problems))
        try:
            status, payload = await self._handlers[op.key](incoming)
        except Rejection as rejection:
            return self._reject(incoming, rejection)
        except Exception as exc:
            # A bug in the fake. Answer 400, not 500: discord.py retries 5xx with growing sleeps, which would
            # turn the bug into a slow timeout. The error is recorded and fails assert_no_invalid_requests().
            log.exception("fake discord crashed on %s %s", incoming.method, incoming.path)
            self.internal_errors.append(f"{incoming.method} {incoming.path}: {exc!r}")
            return json_response({"message": f"fake discord crashed: {exc!r}", "code": 0}, 400)
        if status == 204:
            return web.Response(status=204)
        if self.validate_responses:
            self._validate_response(api, op, status, payload)
        return json_response(payload, status)

    def _not_implemented(self, method: str, path: str) -> web.Response:
        self.unimplemented_requests.append(f"{method} {path}")
        return json_response({"message": f"fake discord: {method} {path} not implemented", "code": 0}, 404)

    def _reject(self, incoming: IncomingRequest, rejection: Rejection) -> web.Response:
        payload: dict[str, Any] = {"message": rejection.message, "code": rejection.code}
        if rejection.errors is not None:
            payload["errors"] = rejection.errors
        self.invalid_requests.append(
            InvalidRequest(
                method=incoming.method,
                path=incoming.path,
                operation=incoming.operation.key,
                status=rejection.status,
                body=incoming.body,
                errors=rejection.errors or {},
                problems=rejection.problems,
            )
        )
        log.warning("fake discord rejected %s %s: %s", incoming.method, incoming.path, rejection.problems)
        return json_response(payload, rejection.status)

    @staticmethod
    async def _read_body(
        request: web.Request,
    ) -> tuple[Any, list[tuple[int, str, bytes, str | None]], str | None]:
        """(JSON body or payload_json, uploaded files, problem); problem: the body is unreadable."""
        files: list[tuple[int, str, bytes, str | None]] = []
        if request.content_type == "multipart/form-data":
            body: Any = None
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader):
                    return None, files, "nested multipart is not supported by Discord"
                name = part.name or ""
                data = await part.read(decode=False)
                if name == "payload_json":
                    try:
                        body = json.loads(data)
                    except ValueError as exc:
                        return None, files, f"payload_json is not JSON: {exc}"
                elif (found := re.fullmatch(r"files\[(\d+)\]", name)) is not None:
                    content_type = part.headers.get("Content-Type")
                    files.append(
                        (
                            int(found.group(1)),
                            part.filename or f"file{found.group(1)}",
                            bytes(data),
                            content_type,
                        )
                    )
                else:
                    return None, files, f"unexpected multipart part {name!r}"
            return body, files, None
        raw = await request.read()
        if not raw:
            return None, files, None
        if request.content_type != JSON_CONTENT_TYPE:
            return None, files, f"unsupported Content-Type {request.content_type!r}"
        try:
            return json.loads(raw), files, None
        except ValueError as exc:
            return None, files, f"body is not JSON: {exc}"

    @staticmethod
    def _validate_request(
        api: OpenAPI, incoming: IncomingRequest, content_type: str
    ) -> tuple[dict[str, Any], list[str]]:
        errors: dict[str, Any] = {}
        problems: list[str] = []
        op = incoming.operation
        for spec in api.parameters(op):
            if spec.location == "path":
                raw: str | None = incoming.params.get(spec.name)
            elif spec.location == "query":
                raw = incoming.query.get(spec.name)
            else:
                continue
            if raw is None:
                if spec.required:
                    insert_error(
                        errors,
                        [spec.name],
                        {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"},
                    )
                    problems.append(f"{spec.location} parameter {spec.name}: required")
                continue
            value: Any = raw
            try:
                if spec.schema_type == "boolean":
                    value = QUERY_BOOLEAN_LITERALS[raw.lower()]
                elif spec.schema_type == "integer":
                    value = int(raw)
                elif spec.schema_type == "number":
                    value = float(raw)
            except (KeyError, ValueError):
                item = {"code": "FAKE_SCHEMA_TYPE", "message": f"{raw!r} is not a valid {spec.schema_type}"}
                insert_error(errors, [spec.name], item)
                problems.append(f"{spec.location} parameter {spec.name}: {item['message']}")
                continue
            shaped, lines = collect_errors(api.validator(spec.schema_pointer).iter_errors(value), [spec.name])
            merge_errors(errors, shaped)
            problems.extend(f"{spec.location} parameter {line}" for line in lines)

        body_pointer = api.request_body_pointer(op, content_type)
        if body_pointer is not None:
            if incoming.body is None:
                if api.request_body_required(op):
                    problems.append("<body>: a request body is required")
                    insert_error(errors, [], {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"})
            else:
                shaped, lines = collect_errors(api.validator(body_pointer).iter_errors(incoming.body))
                merge_errors(errors, shaped)
                problems.extend(lines)
        elif incoming.body is not None:
            problems.append("<body>: this operation takes no request body")
        return errors, problems

    def _validate_response(self, api: OpenAPI, op: Operation, status: int, payload: Any) -> None:
        pointer = api.response_pointer(op, status)
        if pointer is None:
            return
        _, problems = collect_errors(api.validator(pointer).iter_errors(payload))
        if problems:
            self.invalid_responses.append(InvalidResponse(op.key, status, payload, problems))
            log.error("fake discord answered %s with an undocumented shape: %s", op.key, problems)

    async def _get_attachment(self, request: web.Request) -> web.StreamResponse:
        for uploaded in self.files.get(request.match_info["message_id"], []):
            if uploaded.attachment_id == request.match_info["attachment_id"]:
                return web.Response(
                    body=uploaded.data, content_type=uploaded.content_type or "application/octet-stream"
                )
        return web.Response(status=404)
