"""An MCP tool result as the model takes it: text, with images beside it.

Text blocks are joined; images a model takes (PNG, JPEG, GIF, WebP) travel as images,
each named in the text; what a model cannot take (audio, binary resources, other image
types) is described in a line, never dropped silently. Structured content is shown as
JSON when the server sent no text. The engine caps the text like any tool output.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from bot.tools.base import IMAGE_MEDIA_TYPES, ToolImage, ToolOutput

# What an image part may weigh (decoded): providers refuse larger ones.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGES = 8
# What all images of one result may weigh together (decoded).
MAX_RESULT_IMAGE_BYTES = 10 * 1024 * 1024


def result_output(tool: str, result: CallToolResult) -> ToolOutput:
    """The text and images of a successful result of `tool`."""
    lines: list[str] = []
    images: list[ToolImage] = []
    weight = 0
    for block in result.content:
        line, image = _block(tool, block, len(images))
        if image is not None:
            size = len(image.data) * 3 // 4
            if weight + size > MAX_RESULT_IMAGE_BYTES:
                line = f"[{image.name}: over {MAX_RESULT_IMAGE_BYTES:,} bytes of images, left out]"
                image = None
            else:
                weight += size
                images.append(image)
        if line:
            lines.append(line)
    if not any(isinstance(b, TextContent) for b in result.content):
        if result.structured_content is not None:
            lines.append(json.dumps(result.structured_content, ensure_ascii=False, indent=1))
    text = "\n".join(lines) if lines else "(the tool returned nothing)"
    return ToolOutput(text=text, images=tuple(images))


def error_text(result: CallToolResult) -> str:
    """The text of a result the server marked as an error."""
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent)).strip()
    return text or "the tool reported an error without saying why"


def _block(tool: str, block: ContentBlock, shown: int) -> tuple[str, ToolImage | None]:
    if isinstance(block, TextContent):
        return block.text, None
    if isinstance(block, ImageContent):
        return _image(tool, block.data, block.mime_type, shown, what="image")
    if isinstance(block, AudioContent):
        return f"[audio ({block.mime_type}, {_size(block.data)}): not passed to the model]", None
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]", None
    if isinstance(block, EmbeddedResource):
        return _resource(tool, block.resource, shown)
    return f"[a {getattr(block, 'type', 'content')} block the model cannot take]", None


def _resource(
    tool: str, resource: TextResourceContents | BlobResourceContents, shown: int
) -> tuple[str, ToolImage | None]:
    if isinstance(resource, TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}", None
    media_type = resource.mime_type or "application/octet-stream"
    if media_type in IMAGE_MEDIA_TYPES:
        return _image(tool, resource.blob, media_type, shown, what=f"resource {resource.uri}")
    return f"[resource {resource.uri} ({media_type}, {_size(resource.blob)}): binary]", None


def _image(
    tool: str, data: str, media_type: str, shown: int, *, what: str
) -> tuple[str, ToolImage | None]:
    if media_type not in IMAGE_MEDIA_TYPES:
        return f"[{what} ({media_type}): a type models do not take]", None
    data = "".join(data.split())
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[{what} ({media_type}): not valid base64, left out]", None
    size = len(decoded)
    if not _looks_like(decoded, media_type):
        # The provider would refuse the whole request for it.
        return f"[{what}: its bytes are not {media_type}, left out]", None
    if size > MAX_IMAGE_BYTES:
        return f"[{what} ({media_type}, {size:,} bytes): too large to show the model]", None
    if shown >= MAX_IMAGES:
        return f"[{what} ({media_type}): more than {MAX_IMAGES} images, left out]", None
    name = f"{tool}-{shown + 1}"
    return f"[{what} {name} ({media_type}, {size:,} bytes): shown below]", ToolImage(
        name=name, media_type=media_type, data=data
    )


def _looks_like(data: bytes, media_type: str) -> bool:
    """Whether `data` starts as a file of `media_type` does."""
    if media_type == "image/png":
        return data.startswith(b"\x89PNG\r\n\x1a\n")
    if media_type == "image/jpeg":
        return data.startswith(b"\xff\xd8\xff")
    if media_type == "image/gif":
        return data.startswith((b"GIF87a", b"GIF89a"))
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"  # image/webp


def _decoded_size(data: str) -> int | None:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return None


def _size(data: str) -> str:
    size = _decoded_size(data)
    return f"{size:,} bytes" if size is not None else "unreadable"
