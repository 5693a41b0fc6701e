"""The guardrail stages of a turn (004 §2.6; decision 0016).

- `steps.py` (`GuardrailSteps`): where each stage runs in the turn (input, racing the first
  model call; output; tool_input; tool_output) and what a verdict does.
- `checks.py`: evaluating guardrails (pattern, model judge) alone, in parallel, in sequence;
  the input view a racing Replace leaves; no executor state.
- `log.py` (`GuardrailLog`): a stage's decision in the run log (its key, replay after a
  takeover) and the events it publishes.

Nothing is re-exported here: the modules import the executor's layers, which import this
package's modules by their own names.
"""
