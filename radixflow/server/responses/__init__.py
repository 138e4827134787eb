"""Response bodies in OpenAI's shapes, one module per shape; a request's data passes each once.

A route (``server/completions.py``, ``server/chat.py``) checks and submits the request, then hands
the engine's answers to the module of its response's shape, which builds the whole body and
returns it for the route to send:

- `text_completion`: the ``text_completion`` object, plain and as stream chunks (one shape);
- `chat_completion`: the ``chat.completion`` object;
- `chat_chunk`: the ``chat.completion.chunk`` objects of a streamed chat reply;
- `stream`: the server-sent-event stream any chunk shape is sent through;
- `logprobs` (token names, both logprob shapes) and `envelope` (id, model, created; usage): the
  parts the shapes share, which call nothing back.
"""
