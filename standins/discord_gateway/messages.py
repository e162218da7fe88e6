"""Messages in the fake: created and edited by interactions and channel routes, with their attachments, ephemeral
recipients and the webhook tokens allowed to reach them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from standins.discord_gateway.payloads import components_response, embed_response
from standins.discord_gateway.protocol import APPLICATION_COMMAND, EPHEMERAL, LOADING
from standins.discord_gateway.records import IncomingRequest, Interaction, UploadedFile, unknown, utc_now_iso


class MessageStore:
    """How the REST routes create, find and edit messages."""

    def _check_application(self, application_id: str) -> None:
        if application_id != self.application_id:
            raise unknown("Application", 10002)

    def _webhook_interaction(self, req: IncomingRequest) -> Interaction:
        interaction = self._interactions_by_token.get(req.params["webhook_token"])
        if req.params["webhook_id"] != self.application_id or interaction is None:
            raise unknown("Webhook", 10015)
        return interaction

    def _webhook_message_id(self, interaction: Interaction, req: IncomingRequest) -> str:
        message_id = req.params.get("message_id") or interaction.original_message_id
        if message_id is None or message_id not in self.messages:
            raise unknown("Message", 10008)
        if message_id != interaction.original_message_id and message_id not in interaction.message_ids:
            raise unknown("Message", 10008)
        return message_id

    def _attachments(
        self, message_id: str, files: Sequence[tuple[int, str, bytes, str | None]], token: str | None
    ) -> list[dict[str, Any]]:
        attachments = []
        for _index, filename, data, content_type in sorted(files):
            attachment_id = self._snowflake()
            uploaded = UploadedFile(filename, data, content_type, attachment_id, message_id)
            self.files.setdefault(message_id, []).append(uploaded)
            if token is not None:
                self.files.setdefault(token, []).append(uploaded)
            url = f"http://127.0.0.1:{self.port}/attachments/{message_id}/{attachment_id}/{filename}"
            attachment = {
                "id": attachment_id,
                "filename": filename,
                "size": len(data),
                "url": url,
                "proxy_url": url,
            }
            if content_type:
                attachment["content_type"] = content_type
            attachments.append(attachment)
        return attachments

    def _create_message(
        self,
        body: Mapping[str, Any],
        channel_id: str,
        files: Sequence[tuple[int, str, bytes, str | None]],
        *,
        interaction: Interaction | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        message_id = self._snowflake()
        message: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel_id,
            "type": 20 if interaction is not None and interaction.type == APPLICATION_COMMAND else 0,
            "content": body.get("content") or "",
            "author": self.bot_user(),
            "timestamp": utc_now_iso(),
            "edited_timestamp": None,
            "tts": bool(body.get("tts")),
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": self._attachments(message_id, files, token),
            "embeds": [embed_response(e) for e in body.get("embeds") or []],
            "components": components_response(body.get("components") or []),
            "pinned": False,
            "flags": body.get("flags") or 0,
        }
        if interaction is not None:
            message["webhook_id"] = self.application_id
            message["application_id"] = self.application_id
            interaction.message_ids.add(message_id)
            if message["flags"] & EPHEMERAL:
                self._visible_to[message_id] = interaction.user_id
        reference = body.get("message_reference")
        if reference and reference.get("message_id"):
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "channel_id": str(reference.get("channel_id") or channel_id),
                "message_id": str(reference["message_id"]),
            }
        self.messages[message_id] = message
        return message

    def _edit_message(
        self,
        interaction: Interaction | None,
        message_id: str | None,
        body: Mapping[str, Any],
        files: Sequence[tuple[int, str, bytes, str | None]],
    ) -> dict[str, Any]:
        if message_id is None or message_id not in self.messages:
            raise unknown("Message", 10008)
        message = self.messages[message_id]
        if "content" in body:
            message["content"] = body["content"] or ""
        if "embeds" in body:
            message["embeds"] = [embed_response(e) for e in body["embeds"] or []]
        if "components" in body:
            message["components"] = components_response(body["components"] or [])
        if "attachments" in body:
            # "attachments" lists the existing attachments to keep; new uploads come as files[n].
            keep = {str(a["id"]) for a in body["attachments"] or []}
            message["attachments"] = [a for a in message["attachments"] if a["id"] in keep]
        token = interaction.token if interaction is not None else None
        message["attachments"] += self._attachments(message_id, files, token)
        message["flags"] &= ~LOADING
        message["edited_timestamp"] = utc_now_iso()
        if interaction is not None:
            interaction.message_ids.add(message_id)
        return message
