"""The model's chat template, rendered at the router as the engine renders it.

The router routes on the prefix block hashes of the token ids the engine will see. For a
chat request those are the ids of the *templated* prompt, so the router renders the same
template the worker's vLLM renders, from the model's tokenizer files:

- the template: ``chat_template.jinja`` beside the tokenizer (what transformers 5 saves),
  else ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named
  templates: ``tool_use`` when the request has tools and the model has one, else
  ``default``), as transformers' ``get_chat_template`` picks it;
- the environment: jinja2's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and
  ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter that does not escape
  HTML (``json.dumps`` with ``ensure_ascii=False``), ``raise_exception`` and
  ``strftime_now`` (transformers' ``_compile_jinja_template``), and the ``{% generation %}``
  tag rendered as its body;
- the variables: ``messages``, ``tools``, ``documents``, ``add_generation_prompt`` (True),
  ``continue_final_message`` and the special tokens (``bos_token``, ``eos_token``, ... as
  text), as ``apply_chat_template`` passes them;
- the messages as vLLM's ``parse_chat_messages`` prepares them: text parts joined with a
  newline (or kept as ``[{"type": "text", "text": ...}]`` parts, a plain string included,
  when the template loops over a message's content: vLLM's "openai" content format), an
  assistant's ``tool_calls`` kept with their JSON ``arguments`` parsed to objects, a tool
  message's ``tool_call_id``, ``name`` (parts that are not text, images or audio, are left
  out: the ids are the text's); ``developer`` messages become ``system`` ones
  (merged into one first message) when the template does not name the ``developer`` role;
  tools as vLLM dumps them (``{"type": "function", "function": {"name", "description",
  "parameters"[, "strict"]}}``).

The rendered text is then tokenized without added special tokens (the template writes
them), as ``apply_chat_template(tokenize=True)`` does.

A template that raises (``raise_exception("roles must alternate")``) or fails to render is a
:class:`TemplateError` with the template's reason: the request is refused with a 400, as
vLLM refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class TemplateError(ValueError):
    """The chat template refused the request, or the request does not fit its shape."""


def _token_text(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, Mapping) and isinstance(v.get("content"), str):
        return str(v["content"])  # an AddedToken as saved: {"content": "<s>", ...}
    return None


def load_template_files(directory: Path) -> tuple[str | dict[str, str] | None, dict[str, str]]:
    """The chat template(s) and the special tokens' text from a tokenizer folder."""
    config: dict[str, Any] = {}
    cfg_path = directory / "tokenizer_config.json"
    if cfg_path.is_file():
        loaded = json.loads(cfg_path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            config = loaded
    template: str | dict[str, str] | None = None
    jinja_file = directory / "chat_template.jinja"
    raw = config.get("chat_template")
    if jinja_file.is_file():
        template = jinja_file.read_text(encoding="utf-8")
    elif isinstance(raw, str):
        template = raw
    elif isinstance(raw, list):
        template = {
            str(t["name"]): str(t["template"])
            for t in raw
            if isinstance(t, Mapping) and "name" in t and "template" in t
        }
    specials = {k: t for k in SPECIAL_TOKENS if (t := _token_text(config.get(k))) is not None}
    return template, specials


def _compile(source: str) -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """transformers' ``{% generation %}...{% endgeneration %}``: renders its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, env.from_string(source)


def _loops_over_content(env: Any, source: str) -> bool:
    """Whether the template iterates over a message's content (vLLM's "openai" content
    format: the parts are passed as a list), found in its syntax tree."""
    from jinja2 import nodes

    tree = env.parse(source)
    for loop in tree.find_all(nodes.For):
        it = loop.iter
        while isinstance(it, nodes.Filter | nodes.Test) and it.node is not None:
            it = it.node
        if isinstance(it, nodes.Name) and it.name == "content":
            return True
        if isinstance(it, nodes.Getattr) and it.attr == "content":
            return True
        if (
            isinstance(it, nodes.Getitem)
            and isinstance(it.arg, nodes.Const)
            and it.arg.value == "content"
        ):
            return True
    return False


@dataclass(frozen=True)
class _Compiled:
    template: Any
    openai_content: bool
    developer_role: bool


class ChatTemplate:
    """One model's chat template(s) and special tokens; compiled on first use."""

    def __init__(self, template: str | dict[str, str], specials: Mapping[str, str]) -> None:
        self.source = template
        self.specials = dict(specials)
        self._compiled: dict[str, _Compiled] = {}

    @classmethod
    def from_dir(cls, directory: str | Path) -> ChatTemplate | None:
        """The template of the tokenizer folder ``directory``; None when it has none."""
        template, specials = load_template_files(Path(directory))
        if not template:
            return None
        return cls(template, specials)

    def _pick(self, has_tools: bool) -> str:
        if isinstance(self.source, str):
            return self.source
        if has_tools and "tool_use" in self.source:
            return self.source["tool_use"]
        if "default" in self.source:
            return self.source["default"]
        names = ", ".join(sorted(self.source))
        raise TemplateError(f"the model has named chat templates ({names}) and no 'default'")

    def _compile(self, source: str) -> _Compiled:
        c = self._compiled.get(source)
        if c is None:
            import jinja2

            try:
                env, template = _compile(source)
            except jinja2.TemplateError as e:
                raise TemplateError(f"the model's chat template does not compile: {e}") from e
            c = _Compiled(
                template,
                _loops_over_content(env, source),
                '"developer"' in source or "'developer'" in source,
            )
            self._compiled[source] = c
        return c

    @cached_property
    def default_openai_content(self) -> bool:
        return self._compile(self._pick(False)).openai_content

    def render(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        documents: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """The templated prompt text; raises :class:`TemplateError`."""
        import jinja2

        tool_dicts = None if tools is None else [_tool(t) for t in tools]
        c = self._compile(self._pick(bool(tool_dicts)))
        conversation = [_message(m, c.openai_content) for m in messages]
        if not c.developer_role and any(m["role"] == "developer" for m in conversation):
            conversation = _consolidate_system([_developer_to_system(m) for m in conversation])
        if continue_final_message:
            conversation = _tag_final(conversation)
        kwargs: dict[str, Any] = {**self.specials, **(extra or {})}
        kwargs.update(
            messages=conversation,
            tools=tool_dicts,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        )
        try:
            text = str(c.template.render(**kwargs))
        except jinja2.TemplateError as e:
            raise TemplateError(str(e) or type(e).__name__) from e
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            raise TemplateError(f"the chat template could not render the messages: {e}") from e
        if continue_final_message:
            text = _cut_at_tag(text)
        return text


def _text_of(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("type", "text") == "text":
        t = part.get("text")
        return t if isinstance(t, str) else None
    return None


def _message(m: Any, openai_content: bool) -> dict[str, Any]:
    if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
        raise TemplateError("every message must be an object with a string 'role'")
    role = m["role"]
    content = m.get("content")
    if content is None:
        parts: list[str] = []
    elif isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        # parts that are not text (images, audio) are left out: the router routes on the
        # text's ids, and whether the model takes such a part is the engine's to judge
        parts = [t for p in content if (t := _text_of(p)) is not None]
    else:
        raise TemplateError("a message's content must be a string, a list of parts, or null")
    out: dict[str, Any] = {"role": role}
    if openai_content and role != "tool":
        out["content"] = [{"type": "text", "text": t} for t in parts]
    else:
        out["content"] = "\n".join(parts)
    if role == "assistant":
        calls = m.get("tool_calls")
        if isinstance(calls, list) and calls:
            out["tool_calls"] = [_tool_call(c) for c in calls]
        reasoning = m.get("reasoning")
        if reasoning is not None:
            out["reasoning"] = out["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def _tool_call(c: Any) -> Any:
    """An assistant's tool call with its JSON ``arguments`` parsed (vLLM's
    ``_postprocess_messages``: templates expect objects)."""
    if not isinstance(c, Mapping):
        raise TemplateError("assistant tool_calls entries must be objects")
    fn = c.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            args = fn["arguments"]
        return {**c, "function": {**fn, "arguments": args}}
    return dict(c)


def _tool(t: Any) -> dict[str, Any]:
    """A tool as vLLM's ``ChatCompletionToolsParam.model_dump()`` gives it."""
    if not isinstance(t, Mapping) or not isinstance(t.get("function"), Mapping):
        raise TemplateError("every tool must be an object with a 'function' object")
    fn = t["function"]
    f: dict[str, Any] = {
        "name": fn.get("name"),
        "description": fn.get("description"),
        "parameters": fn.get("parameters"),
    }
    for k in ("strict", "defer_loading"):
        if fn.get(k) is not None:
            f[k] = fn[k]
    if t.get("defer_loading") is not None and "defer_loading" not in f:
        f["defer_loading"] = t["defer_loading"]
    out: dict[str, Any] = {"type": t.get("type", "function"), "function": f}
    if t.get("defer_loading") is not None:
        out["defer_loading"] = t["defer_loading"]
    return out


def _developer_to_system(m: dict[str, Any]) -> dict[str, Any]:
    if m["role"] != "developer":
        return m
    out = dict(m, role="system")
    out.pop("tools", None)
    return out


def _consolidate_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's ``_consolidate_system_messages``: every system message merged into one first."""
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    merge = False
    for i, m in enumerate(conversation):
        if m["role"] != "system":
            others.append(m)
            continue
        if i > 0 or texts:
            merge = True
        content = m.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                p["text"] if isinstance(p, dict) else str(p)
                for p in content
                if isinstance(p, str) or (isinstance(p, dict) and "text" in p)
            )
        if content:
            texts.append(content)
    if not merge:
        return conversation
    return [{"role": "system", "content": "\n\n".join(texts)}, *others]


CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _tag_final(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' ``continue_final_message``: a tag after the final message's text (its
    last text part), where the rendered prompt is then cut."""
    if not conversation:
        raise TemplateError("continue_final_message is set but there is no final message")
    final = dict(conversation[-1])
    content = final.get("content")
    if isinstance(content, str):
        final["content"] = content + CONTINUE_TAG
    elif isinstance(content, list) and content:
        parts = [dict(p) for p in content]
        parts[-1]["text"] = str(parts[-1].get("text", "")) + CONTINUE_TAG
        final["content"] = parts
    else:
        raise TemplateError(
            "continue_final_message is set but the final message has no text to continue"
        )
    return [*conversation[:-1], final]


def _cut_at_tag(text: str) -> str:
    tag = CONTINUE_TAG.strip()
    at = text.rfind(tag)
    if at < 0:
        raise TemplateError(
            "continue_final_message is set but the chat template drops the final message"
        )
    if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
