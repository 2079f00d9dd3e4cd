%% Shared helpers of perfgrid's Erlang programs: key=value arguments, the
%% clock, the VM's own CPU use, and the one JSON line each program prints.
%%
%% Every program is run as `erl ... -run MOD main KEY=VALUE ...`; main/1 hands
%% a fun to run/2, which prints the fun's report as one JSON object on stdout
%% and halts with status 0, or prints the error on stderr and halts with 1.
-module(pg_util).
-export([run/2, args/1, int/2, int/3, float/2, str/2, now_ns/0, seconds/2,
         usage/0, usage_delta/2, bindings/0, vm_facts/0, json/1, percentile/3]).

%% Run Fun(ArgMap) and print its report (a map) as one JSON line; never returns.
run(Argv, Fun) ->
    try
        Report = Fun(args(Argv)),
        io:put_chars([json(Report), $\n]),
        erlang:halt(0, [{flush, true}])
    catch
        Class:Reason:Stack ->
            io:format(standard_error, "perfgrid erlang: ~p:~p~n~p~n", [Class, Reason, Stack]),
            erlang:halt(1, [{flush, true}])
    end.

%% ["k=v", ...] -> #{<<"k">> => "v"}
args(Argv) ->
    maps:from_list([begin
                        {K, [$= | V]} = lists:splitwith(fun(C) -> C =/= $= end, A),
                        {list_to_binary(K), V}
                    end || A <- Argv]).

int(Key, Args) -> list_to_integer(maps:get(Key, Args)).
int(Key, Args, Default) ->
    case maps:find(Key, Args) of
        {ok, V} -> list_to_integer(V);
        error -> Default
    end.

float(Key, Args) ->
    V = maps:get(Key, Args),
    try list_to_float(V) catch error:badarg -> float(list_to_integer(V)) end.

str(Key, Args) -> maps:get(Key, Args).

now_ns() -> erlang:monotonic_time(nanosecond).

seconds(Start, End) -> (End - Start) / 1.0e9.

%% CPU time (user, sys in seconds) of every thread of the VM and their context
%% switches (voluntary, involuntary), read from /proc; zeros where /proc is absent.
usage() ->
    {User, Sys} = case file:read_file("/proc/self/stat") of
                      {ok, Stat} ->
                          %% the command name may hold spaces: split after its ')'
                          [_, Rest] = binary:split(Stat, <<") ">>),
                          Fields = binary:split(Rest, <<" ">>, [global]),
                          Tick = 100,  % USER_HZ, 100 on every Linux ABI
                          {binary_to_integer(lists:nth(12, Fields)) / Tick,
                           binary_to_integer(lists:nth(13, Fields)) / Tick};
                      _ -> {0.0, 0.0}
                  end,
    {Vol, Invol} = case file:list_dir("/proc/self/task") of
                       {ok, Tasks} -> lists:foldl(fun ctx/2, {0, 0}, Tasks);
                       _ -> {0, 0}
                   end,
    #{user_s => User, sys_s => Sys, ctx_voluntary => Vol, ctx_involuntary => Invol}.

ctx(Task, {V, I}) ->
    case file:read_file(["/proc/self/task/", Task, "/status"]) of
        {ok, Status} ->
            Lines = binary:split(Status, <<"\n">>, [global]),
            {V + field(<<"voluntary_ctxt_switches:">>, Lines),
             I + field(<<"nonvoluntary_ctxt_switches:">>, Lines)};
        _ -> {V, I}
    end.

field(Name, Lines) ->
    N = byte_size(Name),
    case [L || <<P:N/binary, _/binary>> = L <- Lines, P =:= Name] of
        [<<_:N/binary, Value/binary>> | _] -> binary_to_integer(string:trim(Value));
        [] -> 0
    end.

usage_delta(Before, After) ->
    maps:map(fun(K, V) -> V - maps:get(K, Before) end, After).

%% Where each scheduler thread is bound: "0,1" or "unbound,unbound".
bindings() ->
    Bound = tuple_to_list(erlang:system_info(scheduler_bindings)),
    list_to_binary(lists:join(",", [case B of
                                         unbound -> "unbound";
                                         Cpu -> integer_to_list(Cpu)
                                     end || B <- Bound])).

%% What the report records about the VM itself.
vm_facts() ->
    #{otp_release => list_to_binary(erlang:system_info(otp_release)),
      erts_version => list_to_binary(erlang:system_info(version)),
      schedulers => erlang:system_info(schedulers_online),
      scheduler_bindings => bindings(),
      dirty_io_schedulers => erlang:system_info(dirty_io_schedulers)}.

%% Nearest-rank percentile Q (0..100) of a histogram: Counts is a counters
%% reference of NB buckets, Upper(I) the upper bound of bucket I.
percentile(Q, {Counts, NB}, Upper) ->
    Total = lists:sum([counters:get(Counts, I) || I <- lists:seq(1, NB)]),
    Rank = max(1, ceil(Q / 100 * Total)),
    walk(Counts, 1, NB, Rank, 0, Upper).

walk(_Counts, I, NB, _Rank, _Seen, Upper) when I > NB -> Upper(NB);
walk(Counts, I, NB, Rank, Seen, Upper) ->
    Now = Seen + counters:get(Counts, I),
    if Now >= Rank -> Upper(I);
       true -> walk(Counts, I + 1, NB, Rank, Now, Upper)
    end.

%% A small JSON encoder: maps (atom or binary keys), numbers, binaries,
%% booleans, null and lists.
json(M) when is_map(M) ->
    Pairs = [[json(key(K)), $:, json(V)] || {K, V} <- lists:sort(maps:to_list(M))],
    [${, lists:join($,, Pairs), $}];
json(true) -> <<"true">>;
json(false) -> <<"false">>;
json(null) -> <<"null">>;
json(A) when is_atom(A) -> json(atom_to_binary(A));
json(I) when is_integer(I) -> integer_to_binary(I);
json(F) when is_float(F) ->
    try float_to_binary(F, [short])  % OTP 25+; older releases print the shortest form with ~w
    catch error:badarg -> iolist_to_binary(io_lib:format("~w", [F]))
    end;
json(B) when is_binary(B) -> [$", escape(B), $"];
json(L) when is_list(L) -> [$[, lists:join($,, [json(X) || X <- L]), $]].

key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_binary(K) -> K.

escape(B) ->
    [case C of
         $" -> "\\\"";
         $\\ -> "\\\\";
         C when C < 32 -> io_lib:format("\\u~4.16.0b", [C]);
         C -> C
     end || <<C>> <= B].
