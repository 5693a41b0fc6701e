"""Between the contracts' protos and the pure core: model responses, session history, the Run."""
