"""Error bodies and usage blocks as real servers return them, written from their public documentation
and source (SPEC 10): OpenAI, DeepSeek, vLLM, Ollama and llama.cpp's server. Replayed by tests/fake_model.py."""

# vLLM started without --enable-auto-tool-choice --tool-call-parser, any request with `tools`
VLLM_NO_TOOLS = (400, {"object": "error", "message": "\"auto\" tool choice requires --enable-auto-tool-choice and "
                       "--tool-call-parser to be set", "type": "BadRequestError", "param": None, "code": 400})
VLLM_CONTEXT = (400, {"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you "
                      "requested 2600 tokens (2600 in the messages, 0 in the completion). Please reduce the length of "
                      "the messages or completion.", "type": "BadRequestError", "param": None, "code": 400})
# OpenAI reasoning models
OPENAI_MAX_TOKENS = (400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
                                                "model. Use 'max_completion_tokens' instead.",
                                     "type": "invalid_request_error", "param": "max_tokens",
                                     "code": "unsupported_parameter"}})
OPENAI_TEMPERATURE = (400, {"error": {"message": "Unsupported value: 'temperature' does not support 0 with this "
                                                 "model. Only the default (1) value is supported.",
                                      "type": "invalid_request_error", "param": "temperature",
                                      "code": "unsupported_value"}})
OPENAI_CONTEXT = (400, {"error": {"message": "This model's maximum context length is 128000 tokens. However, your "
                                             "messages resulted in 131072 tokens. Please reduce the length of the "
                                             "messages.", "type": "invalid_request_error", "param": "messages",
                                  "code": "context_length_exceeded"}})
DEEPSEEK_CONTEXT = (400, {"error": {"message": "This model's maximum context length is 65536 tokens. However, you "
                                               "requested 70123 tokens (70123 in the messages, 0 in the completion). "
                                               "Please reduce the length of the messages or completion.",
                                    "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}})
LLAMACPP_CONTEXT = (400, {"error": {"code": 400, "message": "the request exceeds the available context size, try "
                                                            "increasing it", "type": "exceed_context_size_error",
                                    "n_prompt_tokens": 9000, "n_ctx": 8192}})
OLLAMA_NO_TOOLS = (400, {"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools",
                                   "type": "api_error", "param": None, "code": None}})
# a rejection whose body explains nothing (a gateway's): the circuit breaker's case
OPAQUE = (400, {"error": {"message": "Bad Request", "type": "bad_request", "code": None}})

USAGE = {
    "openai_reasoning": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                         "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                         "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                                                       "accepted_prediction_tokens": 0,
                                                       "rejected_prediction_tokens": 0}},
    "deepseek": {"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230,
                 "prompt_tokens_details": {"cached_tokens": 1024},
                 "prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176},
    "vllm": {"prompt_tokens": 1200, "total_tokens": 1230, "completion_tokens": 30,
             "prompt_tokens_details": {"cached_tokens": 992}},
    "vllm_no_prefix_cache": {"prompt_tokens": 1200, "total_tokens": 1230, "completion_tokens": 30,
                             "prompt_tokens_details": None},
    "ollama": {"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230},
    "llamacpp": {"completion_tokens": 30, "prompt_tokens": 1200, "total_tokens": 1230},
}
# usage block -> (prompt, hit, miss, output, reasoning, cache_reported)
USAGE_SPLIT = {"openai_reasoning": (1200, 1024, 176, 300, 256, True), "deepseek": (1200, 1024, 176, 30, 0, True),
               "vllm": (1200, 992, 208, 30, 0, True), "vllm_no_prefix_cache": (1200, 0, 1200, 30, 0, False),
               "ollama": (1200, 0, 1200, 30, 0, False), "llamacpp": (1200, 0, 1200, 30, 0, False)}


def reasoning_refusal(req: dict):
    """A reasoning model's endpoint: `max_tokens` and any temperature but 1 refused, as OpenAI answers them."""
    if "max_tokens" in req:
        return OPENAI_MAX_TOKENS
    if "temperature" in req and req["temperature"] != 1:
        return OPENAI_TEMPERATURE
    return None
