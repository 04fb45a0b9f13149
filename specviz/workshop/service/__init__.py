"""specviz serve: the engine behind an OpenAI-compatible API (docs/race.md). The modules, bottom up (no cycles):
  config    ServiceConfig: what the owner sets on the command line (read by every subcommand's parser: light)
  request   a request's JSON body -> a Job, or ApiError with OpenAI's error fields and a message that says what to change
  hosts     on loopback, only requests whose Host names loopback (DNS rebinding)
  text      committed tokens -> text: characters held back until whole (Detokenizer), stop sequences cut (StopText)
  response  what goes back: a completion's body, a stream's SSE chunks, usage and its truth, and the responses that
            end a request when its client goes away (EventStream, until_disconnect)
  turns     ModelThread: the one thread every model pass runs on, and where a paused prefill lets others' passes run
  connection  uvicorn with a service's connection limits: DeadlineH11 (a request head's and a stalled write's deadlines)
  server    Service (the Starlette app: endpoints, slots, the one model queue, the rounds), load_on_model_thread,
            run_server; its docstring says how it decodes
Import each name from the module that defines it; this package re-exports nothing.
"""
