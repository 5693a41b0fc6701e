"""The model gateway service (ModelGatewayService): the only door to models.

Seed 002 "LLM Integration", "Provider Adapters", "Provider Capability Differences" and
"Model Client Throughput & Rate Limiting"; seed 000 Decide's stop reasons. Adapters for
OpenAI (Responses, Chat Completions), Anthropic Messages and a local llama.cpp model turn
a provider-neutral request into a canonical response. See docs/services/gateway.md.
"""
