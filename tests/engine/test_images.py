"""Images on user messages: content parts, token counting, fitting, and models that take none."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import openai
import pytest

from bot.engine import ChatMessage, Done, Engine, LLMClient
from bot.engine.context import fit
from bot.engine.llm import _IMAGES_REFUSED, LLMResponse
from bot.engine.loop import prompt_images
from bot.engine.messages import ImagePart
from bot.engine.tokens import IMAGE_TOKENS, TokenCounter
from bot.errors import LLMError
from bot.tools.base import ToolRegistry
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, Reply

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
DATA = base64.b64encode(PNG).decode()
IMAGE = ImagePart(name="diagram.png", media_type="image/png", data=DATA)
SEEN = ChatMessage(role="user", content="what is this?\n\n[image: diagram.png]", images=(IMAGE,))
NOTE = "[image diagram.png: this model does not accept images]"


# --------------------------------------------------------------------------- message shape


def test_a_user_message_with_images_becomes_content_parts() -> None:
    assert SEEN.to_openai() == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?\n\n[image: diagram.png]"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}},
        ],
    }
    assert ChatMessage(role="user", content="plain").to_openai()["content"] == "plain"


def test_without_images_notes_stand_for_them() -> None:
    sent = SEEN.to_openai(images=False)
    assert sent == {"role": "user", "content": f"what is this?\n\n[image: diagram.png]\n\n{NOTE}"}
    assert SEEN.without_images().images == ()
    assert ChatMessage(role="user", images=(IMAGE,)).without_images().content == NOTE


def test_image_data_stays_out_of_repr_and_only_users_send_images() -> None:
    assert DATA not in repr(SEEN)
    with pytest.raises(ValueError, match="only a user message"):
        ChatMessage(role="assistant", content="x", images=(IMAGE,))
    with pytest.raises(ValueError, match="not an image type"):
        ImagePart(name="x.svg", media_type="image/svg+xml", data="")


# --------------------------------------------------------------------------- counting


def test_an_image_counts_a_fixed_estimate_whatever_its_size() -> None:
    counter = TokenCounter()
    plain = ChatMessage(role="user", content=SEEN.content)
    huge = replace(IMAGE, data="A" * 5_000_000)
    assert counter.message(SEEN) == counter.message(plain) + IMAGE_TOKENS
    assert counter.message(replace(SEEN, images=(huge, huge))) == (
        counter.message(plain) + 2 * IMAGE_TOKENS
    )


def test_list_content_is_counted_without_breaking() -> None:
    counter = TokenCounter()
    parts: Any = SEEN.to_openai()["content"]
    assert counter.content(parts) == counter.text(SEEN.content) + IMAGE_TOKENS
    assert counter.text(parts) == counter.content(parts)
    assert counter.content("hello") == counter.text("hello")
    assert counter.content(None) == 0


def test_fitting_cuts_text_but_never_an_image() -> None:
    counter = TokenCounter()
    prompt = ChatMessage(
        role="user", content="look at this " + "word " * 5_000, images=(IMAGE, IMAGE)
    )
    old = [
        ChatMessage(role="user", content="old " * 3_000),
        ChatMessage(role="assistant", content="ok"),
    ]
    messages = [ChatMessage(role="system", content="sys"), *old, prompt]
    fitted = fit(messages, budget=2_500, counter=counter, prompt_index=3)
    kept = fitted.messages[-1]
    assert kept.images == (IMAGE, IMAGE)
    assert len(kept.content or "") < len(prompt.content or "")  # the text was cut
    urls = [part["image_url"]["url"] for part in kept.to_openai()["content"][1:]]
    assert urls == [IMAGE.data_url] * 2
    assert fitted.tokens <= 2_500


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "message",
    [
        "Invalid content type. image_url is only supported by certain models.",
        "Model does not support images. Please use a model that does.",
        "image input is not supported - hint: you may need to provide the mmproj",
        "llava-text is not a multimodal model",
        "This model doesn't support vision",
        "Unsupported content type: image_url",
        "Failed to deserialize the JSON body: unknown variant `image_url`, expected `text`",
        "Vision is not enabled for this model.",
    ],
)
def test_refusals_of_images_are_recognised(message: str) -> None:
    assert _IMAGES_REFUSED.search(message)


@pytest.mark.parametrize(
    "message",
    [
        "Could not process image",
        "Invalid image data",
        "You uploaded an unsupported image. Please make sure your image is below 20 MB.",
        "This model's maximum context length is 128000 tokens.",
        "Invalid value for 'temperature'",
    ],
)
def test_other_errors_are_not_taken_for_refusals(message: str) -> None:
    assert not _IMAGES_REFUSED.search(message)


@pytest.fixture
async def text_only() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(accepts_images=False) as fake:
        yield fake


@pytest.fixture
async def text_only_llm(text_only: FakeOpenAI) -> AsyncIterator[LLMClient]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=text_only.url, max_retries=0)
    yield LLMClient(client, retry_deadline_s=5)
    await client.close()


async def answer(llm: LLMClient, messages: list[ChatMessage]) -> LLMResponse:
    items = [item async for item in llm.stream(model="fake-model", messages=messages, tools=())]
    assert isinstance(items[-1], LLMResponse)
    return items[-1]


async def test_a_model_that_refuses_images_gets_notes_once_and_is_remembered(
    text_only: FakeOpenAI, text_only_llm: LLMClient, caplog: pytest.LogCaptureFixture
) -> None:
    text_only.script(Reply(text="I cannot see it."), Reply(text="Still no eyes."))
    with caplog.at_level(logging.WARNING, logger="bot.engine.llm"):
        first = await answer(text_only_llm, [SEEN])
        second = await answer(text_only_llm, [SEEN])

    assert (first.text, second.text) == ("I cannot see it.", "Still no eyes.")
    refused, retried, later = text_only.requests
    assert refused.image_urls == [IMAGE.data_url]
    assert retried.image_urls == [] and retried.messages[0]["content"].endswith(NOTE)
    assert later.image_urls == [] and later.messages[0]["content"].endswith(NOTE)
    assert not text_only_llm.accepts_images("fake-model")
    assert text_only_llm.accepts_images("another-model")
    warnings = [r for r in caplog.records if "takes no images" in r.getMessage()]
    assert len(warnings) == 1
    assert "image_url is only supported" in warnings[0].getMessage()


async def test_an_image_refusal_without_images_is_a_plain_error(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(ErrorReply(status=400, message="Model does not support images."))
    with pytest.raises(LLMError, match="HTTP 400: Model does not support images"):
        await answer(llm, [ChatMessage(role="user", content="hello")])
    assert len(fake_llm.requests) == 1
    assert llm.accepts_images("fake-model")


async def test_a_second_refusal_is_not_retried_again(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    refusal = ErrorReply(status=400, message="Model does not support images.")
    fake_llm.script(refusal, refusal)
    with pytest.raises(LLMError, match="does not support images"):
        await answer(llm, [SEEN])
    assert [len(r.image_urls) for r in fake_llm.requests] == [1, 0]


async def test_a_model_that_takes_images_gets_them(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    fake_llm.script(Reply(text="A diagram."))
    assert (await answer(llm, [SEEN])).text == "A diagram."
    assert fake_llm.requests[0].image_urls == [IMAGE.data_url]


# --------------------------------------------------------------------------- runs


def engine(llm: LLMClient, **kwargs: Any) -> Engine:
    return Engine(
        llm=llm, model="fake-model", tools=ToolRegistry([]), system_prompt="sys", **kwargs
    )


async def test_a_run_sends_its_prompt_images_and_keeps_them_on_the_transcript(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(Reply(text="A diagram."))
    transcript: list[ChatMessage] = []
    events = [
        e
        async for e in engine(llm).run_stream(
            "what is this?", images=[IMAGE], transcript=transcript
        )
    ]
    assert isinstance(events[-1], Done) and events[-1].final_text == "A diagram."
    content = fake_llm.requests[0].messages[-1]["content"]
    assert content[0] == {"type": "text", "text": "what is this?"}
    assert fake_llm.requests[0].image_urls == [IMAGE.data_url]
    assert transcript[0].images == (IMAGE,)


async def test_prompt_images_reach_the_next_run_started_in_the_block(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(Reply(text="seen"), Reply(text="nothing"))
    with prompt_images([IMAGE]):
        [e async for e in engine(llm).run_stream("look")]
    [e async for e in engine(llm).run_stream("look again")]
    assert [len(r.image_urls) for r in fake_llm.requests] == [1, 0]


async def test_a_refusing_model_still_answers_a_run(
    text_only: FakeOpenAI, text_only_llm: LLMClient
) -> None:
    text_only.script(Reply(text="I cannot see images, but the name says diagram."))
    events = [e async for e in engine(text_only_llm).run_stream("what?", images=[IMAGE])]
    assert isinstance(events[-1], Done) and events[-1].stop_reason == "completed"
    assert [len(r.image_urls) for r in text_only.requests] == [1, 0]


async def test_a_request_with_images_does_not_move_the_calibration(
    text_only: FakeOpenAI, text_only_llm: LLMClient
) -> None:
    text_only.script(Reply(text="no eyes"), Reply(text="plain"))
    run = engine(text_only_llm)
    [e async for e in run.run_stream("what?", images=[IMAGE, IMAGE, IMAGE, IMAGE])]
    assert run.counter.ratio("fake-model") == 1.0  # 3,060 counted, a few dozen sent
    [e async for e in run.run_stream("just text")]
    assert run.counter.ratio("fake-model") != 1.0
