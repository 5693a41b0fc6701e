"""What a tool call is, in and out: the words every other room of the tool service shares.

Owns the built-in tools as the model and the runtime see them (`catalog`: `ToolDef`,
`BY_NAME`, 004 §2.7c), the lenient decoding of a call's argument string (`args`:
`CallInput`, `ArgError`, 004 §2.7l), the outcome of a call (`results`: `Outcome`, 004
§2.7b) and bounded capture of output, head and live tail (`output`: `CappedOutput`, 004
§2.7k). Pure: no I/O, no grpc; everything else in `agentrt.tools` builds on these.
"""
