"""MCP tool names, rules and agent tool lists naming them, the config's checks, and
results as the model gets them: including what a hostile server or model would send."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent
from mcp.types import Tool as RemoteTool

from bot.config import ConfigError, FileConfig, load_file_config, load_settings
from bot.mcp.results import MAX_IMAGES, error_text, result_output
from bot.mcp.tools import tool_name, usable_schema
from bot.permissions.rules import Rule
from bot.subagents.definition import AgentDefinition
from bot.tools.base import ToolRegistry, name_matches
from tests.mcp.demo_server import png

PNG = png()


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("mcp__tracker__*", "mcp__tracker__search", True),
        ("mcp__tracker__*", "mcp__trackers__search", False),
        ("mcp__tracker__*", "mcp__tracker_x__search", False),
        ("mcp__*", "mcp__wiki__page", True),
        ("mcp__*", "bash", False),
        ("mcp__tracker__search", "mcp__tracker__search", True),
        ("mcp__tracker__search", "mcp__tracker__search_all", False),
        ("read_file", "read_file", True),
        ("mcp__tracker__*", "mcp__tracker-admin__drop_db", False),
    ],
)
def test_names_cover_tools(pattern: str, name: str, expected: bool) -> None:
    assert name_matches(pattern, name) is expected
    assert Rule.parse(pattern).matches(name, [], "path") is expected


@pytest.mark.parametrize(
    "text",
    [
        "bash*",
        "*",
        "read_*",
        "mcp__tracker__create(*)",
        "mcp__tracker__*(secret*)",
        "mcp__tracker*",
        "mcp__tracker__search*",
        "mcp__a__b__*",
    ],
)
def test_wildcards_only_for_mcp_tools_and_no_patterns_on_them(text: str) -> None:
    # A pattern on an MCP rule would never match (the tool has no main argument): a
    # deny rule the operator trusts must not silently do nothing.
    with pytest.raises(ValueError):
        Rule.parse(text)


@pytest.mark.parametrize(
    "remote",
    ["search", "../../etc/passwd", "a" * 300, "bash", "tool with spaces", "naïve", "x.y"],
)
def test_any_remote_name_becomes_a_valid_function_name_under_its_server(remote: str) -> None:
    name = tool_name("tracker", remote)
    assert name.startswith("mcp__tracker__")
    assert len(name) <= 64
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def test_two_remote_names_never_share_a_function_name() -> None:
    assert tool_name("t", "a.b") != tool_name("t", "a_b")
    assert tool_name("t", "x" * 100) != tool_name("t", "x" * 101)


def test_unusable_schemas_are_refused_with_the_reason() -> None:
    def why(schema: object) -> str:
        parameters, reason = usable_schema(
            RemoteTool.model_construct(name="t", input_schema=schema)
        )
        assert parameters is None
        return reason

    assert "not a JSON object schema" in why({"type": "string"})
    assert "too large" in why({"type": "object", "description": "x" * 30_000})
    # The provider would refuse it, failing every request that offers the tool.
    bad = {"type": "object", "properties": {"q": {"type": "strang"}}}
    assert "not valid JSON Schema" in why(bad)
    assert "not valid JSON Schema" in why({"type": "object", "additionalProperties": "no"})
    assert "not plain JSON" in why({"type": "object", "default": float("nan")})
    fine, _ = usable_schema(RemoteTool.model_construct(name="t", input_schema={"type": "object"}))
    assert fine == {"type": "object", "properties": {}}


def test_a_loose_star_in_an_agent_file_widens_nothing() -> None:
    # Not a server's wildcard: taken as an exact name, which no tool has.
    assert not name_matches("mcp__tracker*", "mcp__tracker-admin__drop_db")
    assert not name_matches("mcp__tracker__search*", "mcp__tracker__search_and_delete")


def test_an_agent_file_narrows_to_a_servers_tools(tmp_path: Path) -> None:
    class Named:
        control = False

        def __init__(self, name: str) -> None:
            self.name = name

    parent = ToolRegistry(
        Named(n)  # type: ignore[misc]
        for n in ("read_file", "mcp__tracker__a", "mcp__tracker__b", "mcp__wiki__c")
    )
    only_tracker = AgentDefinition(
        name="t", description="d", system_prompt="p", tools=("mcp__tracker__*", "read_file")
    )
    assert only_tracker.resolve_tools(parent).names() == [
        "read_file",
        "mcp__tracker__a",
        "mcp__tracker__b",
    ]
    no_mcp = AgentDefinition(
        name="n", description="d", system_prompt="p", disallowed_tools="mcp__*"
    )
    assert no_mcp.resolve_tools(parent).names() == ["read_file"]


def test_text_images_and_resources_as_the_model_gets_them() -> None:
    png = base64.b64encode(PNG).decode()
    result = CallToolResult(
        content=[
            TextContent(type="text", text="hello"),
            ImageContent(type="image", data=png, mime_type="image/png"),
            ImageContent(type="image", data=png, mime_type="image/tiff"),
            ImageContent(type="image", data="!!not base64!!", mime_type="image/png"),
            # A lie about the type: the provider would refuse the request for it.
            ImageContent(type="image", data=png, mime_type="image/jpeg"),
            ImageContent(type="image", data=png[:-4] + "!!!!", mime_type="image/png"),
        ]
    )
    output = result_output("mcp__t__x", result)
    assert [i.media_type for i in output.images] == ["image/png"]
    assert output.text.splitlines()[0] == "hello"
    assert "(image/tiff): a type models do not take" in output.text
    assert output.text.count("not valid base64") == 2
    assert "its bytes are not image/jpeg, left out" in output.text


def test_a_flood_of_images_is_cut() -> None:
    png = base64.b64encode(PNG).decode()
    many = [ImageContent(type="image", data=png, mime_type="image/png")] * (MAX_IMAGES + 3)
    output = result_output("mcp__t__x", CallToolResult(content=many))
    assert len(output.images) == MAX_IMAGES
    assert output.text.count("left out") == 3


def test_the_images_of_one_result_are_bounded_in_bytes() -> None:
    # Four valid 4 MB PNGs: within the per-image limit, over the per-result one.
    big = base64.b64encode(PNG + b"\0" * (4 * 1024 * 1024)).decode()
    many = [ImageContent(type="image", data=big, mime_type="image/png")] * 4
    output = result_output("mcp__t__x", CallToolResult(content=many))
    assert len(output.images) == 2
    assert output.text.count("bytes of images, left out") == 2


def test_structured_only_and_empty_results() -> None:
    structured = CallToolResult(content=[], structured_content={"count": 3})
    assert '"count": 3' in result_output("t", structured).text
    assert result_output("t", CallToolResult(content=[])).text == "(the tool returned nothing)"
    blob = EmbeddedResource.model_validate(
        {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAAA"}}
    )
    assert "binary" in result_output("t", CallToolResult(content=[blob])).text
    assert error_text(CallToolResult(content=[], is_error=True)).startswith("the tool reported")


def test_config_errors_name_the_server_and_the_problem(tmp_path: Path) -> None:
    def problem(servers: object) -> str:
        path = tmp_path / "baton.yaml"
        path.write_text(yaml.safe_dump({"mcp_servers": servers}))
        with pytest.raises(ConfigError) as caught:
            load_file_config(path)
        return str(caught.value)

    assert "mcp_servers.files.command" in problem({"files": {"command": "my-server --stdio"}})
    assert "either `command`" in problem({"x": {"url": "http://a", "command": ["a"]}})
    assert "either `command`" in problem({"x": {}})
    assert "mcp_servers.a__b" in problem({"a__b": {"url": "http://a"}})
    assert "one of Baton's own secrets" in problem(
        {"x": {"url": "http://a", "headers": {"Authorization": "Bearer ${SLACK_BOT_TOKEN}"}}}
    )
    assert "one of Baton's own secrets" in problem(
        {"x": {"command": ["s"], "env": {"KEY": "${OPENAI_API_KEY}"}}}
    )
    # The forge's and the trace collector's credentials are Baton's too.
    for name in ("GITHUB_TOKEN", "GITHUB_WEBHOOK_SECRET", "OTEL_EXPORTER_OTLP_HEADERS"):
        assert "one of Baton's own secrets" in problem(
            {"x": {"url": "http://a", "headers": {"Authorization": f"x ${{{name}}}"}}}
        ), name
    assert "for stdio servers" in problem({"x": {"url": "http://a", "network": True}})
    assert "for HTTP servers" in problem({"x": {"command": ["s"], "headers": {"A": "b"}}})
    assert "mcp_servers.x.url" in problem({"x": {"url": "file:///etc/passwd"}})
    assert "unknown key" in problem({"x": {"url": "http://a", "sandbox": False}})
    assert FileConfig.model_validate({"mcp_servers": {"ok-1": {"url": "https://a"}}})


def test_relative_paths_are_read_from_the_configs_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    config = tmp_path / "etc" / "baton.yaml"
    config.parent.mkdir()
    config.write_text(
        yaml.safe_dump({"mcp_servers": {"files": {"command": ["s"], "paths": ["srv", "/opt/x"]}}})
    )
    monkeypatch.setenv("BATON_CONFIG", str(config))
    monkeypatch.setenv("BATON_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("BATON_STATE_DIR", str(tmp_path / "state"))
    settings = load_settings(tmp_path)
    assert settings.mcp_servers["files"].paths == (tmp_path / "etc" / "srv", Path("/opt/x"))
