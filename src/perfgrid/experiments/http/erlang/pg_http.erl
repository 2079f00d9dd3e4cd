%% http (seed E5 a) in Erlang: a counter behind one database transaction per request.
%%
%% A gen_tcp server on 127.0.0.1 (a pool of acceptors; each accepted
%% connection is served by the process that accepted it, which first starts
%% a replacement acceptor). Each GET increments a counter in an mnesia
%% transaction (read with a write lock, write value+1) and answers the
%% previous value, zero-padded to 20 digits like the Python server. If mnesia
%% cannot start, an ETS counter (ets:update_counter/3) stands in and the
%% ready line says why.
%%
%% Control over stdin/stdout, one JSON line per answer: the ready line
%% ({"port": ...}) once listening; `reset` sets the counter to 0, `count`
%% reads it, `stop` or end of input halts the VM.
-module(pg_http).
-export([main/1]).

-define(DIGITS, 20).

main(Argv) ->
    try serve(pg_util:args(Argv))
    catch
        Class:Reason:Stack ->
            io:format(standard_error, "perfgrid erlang http: ~p:~p~n~p~n", [Class, Reason, Stack]),
            erlang:halt(1, [{flush, true}])
    end.

serve(Args) ->
    Port = pg_util:int(<<"port">>, Args, 0),
    Acceptors = pg_util:int(<<"acceptors">>, Args, 16),
    Want = pg_util:str(<<"db">>, Args),
    Dir = pg_util:str(<<"dir">>, Args),
    {Db, Note} = database(Want, Dir),
    {ok, Listen} = gen_tcp:listen(Port, [binary, {packet, http_bin}, {active, false},
                                         {ip, {127, 0, 0, 1}}, {reuseaddr, true},
                                         {backlog, 4096}, {nodelay, true}]),
    {ok, Bound} = inet:port(Listen),
    [spawn(fun() -> acceptor(Listen, Db) end) || _ <- lists:seq(1, Acceptors)],
    reply(maps:merge(#{port => Bound, database => db_name(Db), database_note => Note,
                       acceptors => Acceptors}, pg_util:vm_facts())),
    control(Db).

%% {Db, Note}: mnesia if asked and it starts, else ETS with the reason.
database("ets", _Dir) -> {ets_counter(), <<"ets asked for">>};
database("mnesia", Dir) ->
    application:set_env(mnesia, dir, Dir),
    try
        ok = mnesia:start(),
        {atomic, ok} = mnesia:create_table(counter, [{ram_copies, [node()]},
                                                     {attributes, [id, value]}]),
        ok = mnesia:wait_for_tables([counter], 10000),
        set_counter(mnesia, 0),
        {mnesia, <<"mnesia ram_copies table, one transaction per request">>}
    catch
        Class:Reason ->
            Why = iolist_to_binary(io_lib:format("mnesia did not start (~p:~0p); ETS instead",
                                                 [Class, Reason])),
            {ets_counter(), Why}
    end.

ets_counter() ->
    Tab = ets:new(pg_counter, [public, set, {write_concurrency, true}]),
    ets:insert(Tab, {1, 0}),
    {ets, Tab}.

db_name(mnesia) -> <<"mnesia">>;
db_name({ets, _}) -> <<"ets">>.

%% Counter + 1; the previous value.
increment(mnesia) ->
    case mnesia:transaction(fun() ->
                                    [{counter, 1, V}] = mnesia:read(counter, 1, write),
                                    ok = mnesia:write({counter, 1, V + 1}),
                                    V
                            end) of
        {atomic, V} -> {ok, V};
        {aborted, Reason} -> {error, Reason}
    end;
increment({ets, Tab}) -> {ok, ets:update_counter(Tab, 1, {2, 1}) - 1}.

set_counter(mnesia, V) -> {atomic, ok} = mnesia:transaction(fun() -> mnesia:write({counter, 1, V}) end);
set_counter({ets, Tab}, V) -> true = ets:insert(Tab, {1, V}).

read_counter(mnesia) -> {atomic, [{counter, 1, V}]} = mnesia:transaction(fun() -> mnesia:read(counter, 1) end), V;
read_counter({ets, Tab}) -> [{1, V}] = ets:lookup(Tab, 1), V.

control(Db) ->
    case io:get_line("") of
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        Line ->
            case string:trim(Line) of
                "reset" -> set_counter(Db, 0), reply(#{counter => read_counter(Db)});
                "count" -> reply(#{counter => read_counter(Db)});
                "stop" -> erlang:halt(0, [{flush, true}]);
                Other -> reply(#{error => list_to_binary(io_lib:format("~p", [Other]))})
            end,
            control(Db)
    end.

reply(Map) -> io:put_chars([pg_util:json(Map), $\n]).

acceptor(Listen, Db) ->
    case gen_tcp:accept(Listen) of
        {ok, Socket} ->
            spawn(fun() -> acceptor(Listen, Db) end),
            connection(Socket, Db);
        {error, closed} -> ok;
        {error, _} -> timer:sleep(10), acceptor(Listen, Db)
    end.

connection(Socket, Db) ->
    case gen_tcp:recv(Socket, 0) of
        {ok, {http_request, Method, _Uri, Version}} ->
            case headers(Socket, none) of
                {ok, Connection} ->
                    Keep = keepalive(Version, Connection),
                    {Status, Body} = answer(Method, Db),
                    case gen_tcp:send(Socket, response(Status, Body, Keep)) of
                        ok when Keep -> connection(Socket, Db);
                        _ -> gen_tcp:close(Socket)
                    end;
                closed -> gen_tcp:close(Socket)
            end;
        {ok, _Bad} ->
            gen_tcp:send(Socket, response(<<"400 Bad Request">>, <<"bad request\n">>, false)),
            gen_tcp:close(Socket);
        {error, _} -> gen_tcp:close(Socket)
    end.

headers(Socket, Connection) ->
    case gen_tcp:recv(Socket, 0) of
        {ok, http_eoh} -> {ok, Connection};
        {ok, {http_header, _, 'Connection', _, Value}} -> headers(Socket, string:lowercase(Value));
        {ok, {http_header, _, _, _, _}} -> headers(Socket, Connection);
        _ -> closed
    end.

%% HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked.
keepalive({1, 1}, Connection) -> Connection =/= <<"close">>;
keepalive(_, Connection) -> Connection =:= <<"keep-alive">>.

answer('GET', Db) ->
    case increment(Db) of
        {ok, V} ->
            Digits = integer_to_binary(V),
            Pad = binary:copy(<<"0">>, max(0, ?DIGITS - byte_size(Digits))),
            {<<"200 OK">>, <<Pad/binary, Digits/binary, "\n">>};
        {error, Reason} ->
            {<<"503 Service Unavailable">>, iolist_to_binary(io_lib:format("~0p~n", [Reason]))}
    end;
answer(_, _Db) -> {<<"405 Method Not Allowed">>, <<"GET only\n">>}.

response(Status, Body, Keep) ->
    [<<"HTTP/1.1 ">>, Status, <<"\r\nContent-Type: text/plain\r\nContent-Length: ">>,
     integer_to_binary(byte_size(Body)), <<"\r\nConnection: ">>,
     case Keep of true -> <<"keep-alive">>; false -> <<"close">> end,
     <<"\r\n\r\n">>, Body].
