"""The router's chat template rendering (router/frontend/chat_template.py), which must equal
what vLLM renders (transformers' ``apply_chat_template`` over vLLM's parsed messages) so the
prefix hashes it routes on are those the engine caches. The vLLM tier compares token ids with
the real thing (tests/vllm_tier/test_vllm_router_template.py); here, literal references."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preheat.engine.simtokenizer import SimTokenizer
from preheat.router.frontend.chat_template import ChatTemplate, TemplateError
from preheat.router.frontend.openai_schema import BodyError
from preheat.router.frontend.passthrough import PromptIds
from preheat.router.frontend.tokenizer import SimPromptTokenizer

# the tiny model's template (preheat.engine.tinymodel), as its tokenizer files hold it
TINY = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
MESSAGES = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi <b>x</b>"}]


def test_tiny_template_renders_as_transformers_does() -> None:
    t = ChatTemplate(TINY, SPECIALS)
    # transformers 5.19's apply_chat_template(MESSAGES, tokenize=False,
    # add_generation_prompt=True) over the tiny model gives exactly this
    assert t.render(MESSAGES) == (
        "<s><|system|>\nbe terse</s>\n<|user|>\nhi <b>x</b></s>\n<|assistant|>\n"
    )
    assert t.render(MESSAGES, add_generation_prompt=False).endswith("</s>\n")
    # text parts are joined with a newline (vLLM's "string" content format)
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]
    assert t.render(parts) == "<s><|user|>\na\nb</s>\n<|assistant|>\n"
    # null content (an assistant's tool call turn) renders as empty text
    assert "<|assistant|>\n</s>" in t.render([{"role": "assistant", "content": None}])


def test_loaded_from_tokenizer_files(tmp_path: Path) -> None:
    cfg = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": "x"}))
    (tmp_path / "chat_template.jinja").write_text(TINY)  # transformers 5 writes this: it wins
    t = ChatTemplate.from_dir(tmp_path)
    assert t is not None
    assert t.render(MESSAGES).startswith("<s><|system|>")
    (tmp_path / "chat_template.jinja").unlink()
    named = [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    t = ChatTemplate.from_dir(tmp_path)
    assert t is not None
    assert t.render(MESSAGES) == "D"
    assert t.render(MESSAGES, tools=[{"type": "function", "function": {"name": "f"}}]) == "T"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert ChatTemplate.from_dir(tmp_path) is None


def test_transformers_environment() -> None:
    # tojson does not escape HTML; loop controls; {% generation %}; trim/lstrip blocks
    src = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}{{ m | tojson }}{% endgeneration %}{% endfor %}\n"
        "  {% if tools %}{{ tools | tojson }}{% endif %}"
    )
    t = ChatTemplate(src, {})
    out = t.render([{"role": "user", "content": "<b>é</b>"}, {"role": "user", "content": "no"}])
    assert out == '{"role": "user", "content": "<b>é</b>"}'
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    out = t.render([{"role": "user", "content": "x"}], tools=tools)
    # vLLM's dump of a tool: description and parameters always present
    assert out.endswith(
        '[{"type": "function", "function": {"name": "f", "description": null, '
        '"parameters": {"type": "object"}}}]'
    )
    bad = ChatTemplate("{{ raise_exception('roles must alternate') }}", {})
    with pytest.raises(TemplateError, match="roles must alternate"):
        bad.render(MESSAGES)
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}", {}).render(MESSAGES)


def test_sandbox_refuses_unsafe_access() -> None:
    t = ChatTemplate("{{ messages.__class__.__mro__ }}", {})
    with pytest.raises(TemplateError):
        t.render(MESSAGES)


def test_messages_prepared_as_vllm_does() -> None:
    t = ChatTemplate(
        "{% for m in messages %}{{ m['role'] }}={{ m['content'] }}"
        "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.city }}{% endif %};"
        "{% endfor %}",
        {},
    )
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
    }
    out = t.render(
        [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "q"},
            {"role": "system", "content": "more"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ]
    )
    # developer -> system (the template names no developer role), systems merged first;
    # tool-call arguments parsed to an object
    assert out == "system=rules\n\nmore;user=q;assistant=Oslo;"
    # a template that loops over content gets OpenAI's parts, a plain string included
    parts = ChatTemplate(
        "{% for m in messages %}{% for p in m['content'] %}[{{ p.text }}]{% endfor %}{% endfor %}",
        {},
    )
    assert parts.default_openai_content
    assert parts.render([{"role": "user", "content": "s"}]) == "[s]"
    # a part that is not text is left out of the routing ids (the engine judges it)
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    assert parts.render([{"role": "user", "content": [image, {"type": "text", "text": "t"}]}]) == (
        "[t]"
    )


def test_prompt_ids_are_the_templated_prompts_ids() -> None:
    ids = PromptIds(SimPromptTokenizer())
    ids._template = (ChatTemplate(TINY, SPECIALS),)
    text = ids.chat_text({"messages": MESSAGES})
    assert text == ChatTemplate(TINY, SPECIALS).render(MESSAGES)
    assert ids.encode(text, False, 4096) == SimTokenizer().encode(text)
    with pytest.raises(BodyError) as e:
        ids.chat_text({"messages": []})
    assert e.value.param == "messages"
    # no template (the sim tokenizer): the gRPC path's role-tagged lines
    plain = PromptIds(SimPromptTokenizer())
    assert plain.chat_text({"messages": MESSAGES}).endswith("assistant:")


def test_continue_final_message_cuts_after_its_text() -> None:
    t = ChatTemplate(TINY, SPECIALS)
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, the"}]
    # transformers: the prompt ends where the final message's text ends (no eos after it)
    assert t.render(conv, add_generation_prompt=False, continue_final_message=True) == (
        "<s><|user|>\nhi</s>\n<|assistant|>\nSure, the"
    )
    # null content is empty text to vLLM (its parsed messages), so the cut comes after it
    only = [{"role": "assistant", "content": None}]
    assert t.render(only, add_generation_prompt=False, continue_final_message=True) == (
        "<s><|assistant|>\n"
    )
    # a template that drops the final message cannot be continued
    with pytest.raises(TemplateError, match="drops the final message"):
        ChatTemplate("{{ bos_token }}", SPECIALS).render(only, continue_final_message=True)
