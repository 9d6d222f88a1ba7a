"""Request parameters (``params.inference`` and a judge's ``inference``): typed, and typo-proof.

A misspelt key used to be sent as it was (``max_token: 64`` went to the endpoint, and no
token limit at all), so known OpenAI / NIM request fields are declared with their types,
an unknown key close to a known one is an error naming it, and ``stream`` is refused (the
evaluator reads whole replies; a streamed one would be retried as malformed and billed each
time). Keys that are far from every known one pass through as they are, as do deliberate
vendor extras under ``extra_body`` (merged into the request body unchanged).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from beameval.core.suggest import closest

__all__ = ["InferenceParams", "KNOWN_REQUEST_FIELDS"]

#: Fields OpenAI's chat/completions APIs and NIM / vLLM servers document, beyond the typed ones below.
KNOWN_REQUEST_FIELDS = frozenset(
    {
        "audio", "best_of", "chat_template_kwargs", "echo", "guided_choice", "guided_grammar", "guided_json",
        "guided_regex", "ignore_eos", "include_stop_str_in_output", "length_penalty", "logit_bias", "metadata",
        "min_p", "min_tokens", "modalities", "nvext", "parallel_tool_calls", "prediction", "reasoning_effort",
        "repetition_penalty", "response_format", "service_tier", "skip_special_tokens", "stop_token_ids", "store",
        "stream_options", "suffix", "tool_choice", "tools", "top_k", "top_logprobs", "use_beam_search", "user",
        "verbosity", "web_search_options",
    }
)  # fmt: skip


class InferenceParams(BaseModel):
    """Parameters merged into every request."""

    model_config = ConfigDict(extra="allow", frozen=True)

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    stop: list[str] | None = None
    seed: int | None = None
    n: Literal[1] | None = None  # one answer per request: repeats are params.repeats
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logprobs: bool | int | None = None
    extra_body: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_typos_no_streaming(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("stream"):
            raise ValueError(
                "stream: true is not supported: the evaluator reads whole replies (remove it; "
                "a streamed reply would be retried as malformed and billed each time)"
            )
        known = sorted(set(cls.model_fields) | KNOWN_REQUEST_FIELDS | {"stream"})
        for key in data:
            if key in known:
                continue
            close = closest(str(key), known, cutoff=0.75)
            if close:
                raise ValueError(
                    f"unknown request parameter {key!r}: did you mean {close!r}? "
                    "(a vendor-specific parameter of that name goes under extra_body)"
                )
        return data

    @model_validator(mode="after")
    def _one_token_limit(self) -> InferenceParams:
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("set max_tokens or max_completion_tokens, not both")
        return self

    def as_request_params(self) -> dict[str, Any]:
        """The parameters to merge into each request (unset ones left out; ``stream: false`` dropped)."""
        params = self.model_dump(exclude_none=True)
        if params.get("stream") is False:
            del params["stream"]
        return params
