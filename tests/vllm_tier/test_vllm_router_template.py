"""The router's templated token ids (router/frontend/passthrough.py ``PromptIds`` over
router/frontend/chat_template.py) equal vLLM's own: vLLM's message parsing and
``safe_apply_chat_template`` over the tiny model's tokenizer files, for the tiny model's
template and for two richer ones (tools, tool calls, ``tojson``, content parts), so the prefix
blocks the router hashes are the blocks vLLM caches."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import StaticDiscovery
from preheat.router.frontend.passthrough import PromptIds
from preheat.router.frontend.tokenizer import HFPromptTokenizer, TokenizerLoadError

pytestmark = pytest.mark.vllm

TOOLS_TEMPLATE = (
    "{%- if tools %}<|system|>\n"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n{% endif %}"
    "# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}{{ eos_token }}\n"
    "{%- elif messages[0]['role'] == 'system' %}<|system|>\n"
    "{{ messages[0]['content'] }}{{ eos_token }}\n{%- endif %}\n"
    "{%- for message in messages %}\n"
    "  {%- if message.role == 'system' and loop.first %}\n"
    "  {%- elif message.role == 'assistant' and message.tool_calls %}<|assistant|>\n"
    "{% for tc in message.tool_calls %}<tool_call>"
    "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}"
    "</tool_call>{% endfor %}{{ eos_token }}\n"
    "  {%- elif message.role == 'tool' %}<|tool|>\n{{ message.content }}{{ eos_token }}\n"
    "  {%- else %}<|{{ message.role }}|>\n{{ message.content }}{{ eos_token }}\n"
    "  {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
PARTS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>"
    "{% for c in m.content %}{% if c.type == 'text' %}[{{ c.text }}]{% endif %}{% endfor %}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "the weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "now", "strict": True}},  # no description
]
CONVERSATIONS: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    ([{"role": "user", "content": "hello"}], None),
    ([{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi <b>ü</b>"}], None),
    (
        [
            {"role": "system", "content": "rules"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": "the model answer"},
            {"role": "user", "content": "and the next question"},
        ],
        None,
    ),
    ([{"role": "developer", "content": "dev rules"}, {"role": "user", "content": "q"}], None),
    (
        [
            {"role": "system", "content": "use tools"},
            {"role": "user", "content": "weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "cold"},
        ],
        TOOLS,
    ),
]


def _with_template(tiny: Path, dst: Path, template: str | None) -> Path:
    shutil.copytree(tiny, dst)
    if template is not None:
        (dst / "chat_template.jinja").write_text(template)
    return dst


@pytest.fixture(scope="module", params=["tiny", "tools", "parts"])
def model_dir(request: pytest.FixtureRequest, tiny_model: Path, tmp_path_factory: Any) -> Path:
    template = {"tiny": None, "tools": TOOLS_TEMPLATE, "parts": PARTS_TEMPLATE}[request.param]
    return _with_template(tiny_model, tmp_path_factory.mktemp(request.param) / "m", template)


def _vllm_ids(
    model_dir: Path, messages: list[dict[str, Any]], tools: Any, *, continue_final: bool = False
) -> list[int]:
    """vLLM's chat preprocessing, as its OpenAI serving layer runs it (the tools as its
    request model dumps them)."""
    from transformers import AutoTokenizer
    from vllm.config import ModelConfig
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.renderers.chat_utils import _postprocess_messages, parse_chat_messages
    from vllm.renderers.hf import (
        resolve_chat_template_content_format,
        safe_apply_chat_template,
    )

    if tools is not None:
        tools = [ChatCompletionToolsParam.model_validate(t).model_dump() for t in tools]
    mc = ModelConfig(model=str(model_dir), tokenizer=str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fmt = resolve_chat_template_content_format(None, tools, "auto", tok, model_config=mc)
    conv, _, _ = parse_chat_messages(messages, mc, fmt)
    _postprocess_messages(conv)
    ids = safe_apply_chat_template(
        mc,
        tok,
        conv,
        tools=tools,
        tokenize=True,
        add_generation_prompt=not continue_final,
        continue_final_message=continue_final,
    )
    assert isinstance(ids, list)
    return [int(i) for i in ids]


@pytest.mark.parametrize("case", range(len(CONVERSATIONS)))
def test_router_templated_ids_equal_vllms(model_dir: Path, case: int) -> None:
    messages, tools = CONVERSATIONS[case]
    for spec in (model_dir, model_dir / "tokenizer.json"):  # hf:DIR and hf:tokenizer.json
        ids = PromptIds(HFPromptTokenizer(str(spec)))
        body: dict[str, Any] = {"messages": messages}
        if tools is not None:
            body["tools"] = tools
        mine = ids.encode(ids.chat_text(body), False, 1 << 20)
        assert mine == _vllm_ids(model_dir, messages, tools)


def test_completion_ids_carry_bos_as_vllms(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    ids = PromptIds(HFPromptTokenizer(str(tiny_model / "tokenizer.json")))
    text = "the model answers the first question"
    assert ids.encode(text, True, 4096) == tok(text)["input_ids"]
    assert ids.encode(text, False, 4096) == tok(text, add_special_tokens=False)["input_ids"]


def test_continue_final_message_equals_vllms(model_dir: Path) -> None:
    messages = [
        {"role": "user", "content": "complete this"},
        {"role": "assistant", "content": "The cache holds "},
    ]
    ids = PromptIds(HFPromptTokenizer(str(model_dir)))
    text = ids.chat_text(
        {"messages": messages}, add_generation_prompt=False, continue_final_message=True
    )
    mine = ids.encode(text, False, 1 << 20)
    assert mine == _vllm_ids(model_dir, messages, None, continue_final=True)


async def test_the_router_loads_its_tokenizer_before_it_listens(
    model_dir: Path, tmp_path: Path
) -> None:
    # a first request that loaded it held the router's loop for the load (10 s importing
    # transformers on a loaded machine), long enough for its endpoint's figures to go stale
    for spec in (model_dir, model_dir / "tokenizer.json"):
        server = RouterServer(StaticDiscovery([]), RouterConfig(tokenizer=f"hf:{spec}"))
        await server.start()
        try:
            tok = server.pools.tokenizer
            assert isinstance(tok, HFPromptTokenizer)
            assert tok.loaded
        finally:
            await server.stop()
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    server = RouterServer(StaticDiscovery([]), RouterConfig(tokenizer=f"hf:{bad}"))
    with pytest.raises(TokenizerLoadError, match=f"--tokenizer hf:{bad}: "):
        await server.start()
    assert server.ports is None  # nothing was bound
    await server.stop()
