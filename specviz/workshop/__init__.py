"""What a shared server needs: the owner's rules, fair turns on a model, sessions freed, runs that survive, the room.
Plain Python (no streamlit); the pages' side of these is specviz.ui. The modules, by what they serve:
  policy         the owner's rules for a shared server (Policy: who may do what, and how much), validated there
  clients        who is at the other end of a session: the address per-client limits count, and whether it is the owner
  presenter_key  the presenter key: how strong it must be, a strong one made for the owner, the wrong keys' limits
  probe_urls     the URLs the probe may reach from a shared server (the owner's allow-list)
  queues         a loaded model shared between sessions: one queue per model, turns by client address (ModelQueue,
                 model_queue, turns_in_flight), and torch's threads per server process (server_threads)
  sessions       the sessions seen recently, and freeing those gone or idle (SessionRegistry)
  sweeper        the one thread per process that calls SessionRegistry.sweep and gives the heap back
  foreground     foreground work in this process (a rerun and its rounds), so background work yields to it
  jobs           long jobs (a benchmark sweep, the labs' samplers, the cost profile, the numerics comparison), one turn
                 a run
  baselines      the plain-decoding baselines that time the step-through page's runs: measured in the background, shared
  budgets        the KV-cache budget of tokens every session's runs and long jobs reserve from
  resources      what a process keeps for all its sessions (models, shared views, locks), in bounded registries
  files          replacing a file atomically and holding an flock over a read-modify-write, for the run directory
  store/         the room's store the replicas share: one interface, the run directory or Redis (open_store)
  liveness       which replicas are alive, on the room's store
  saved_runs     runs that survive a restart, on the room's store under a random token (``?run=…``)
  presentation   the room follows the teacher: the live presentation and the board of the room's forks
  lesson         the 45-minute lesson's tasks and the room's anonymous count of who finished each
  race_room      the race page's room: the presenter's race and the exercise "Which service speculates?"
  pair           `specviz serve-pair`: the exercise's two services, which one speculates kept on the room's store
  room/          a room bigger than one process: replicas behind HAProxy, their supervisor, a replica on a worker, the
                 presenter key handed to them (`specviz room`, `specviz replica`)
  processes      child processes: a free loopback port, whether one answers yet, dying with the parent, stopping a group
  service/       `specviz serve`: the engine behind an OpenAI-compatible API, with its own queue and model thread (it
                 shares nothing with the pages' queues above)
Import each name from the module that defines it; this package re-exports nothing.
"""
