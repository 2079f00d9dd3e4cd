%% ring (seed E5 b) in Erlang: `rings` rings of `size` processes pass a token.
%%
%% Member 0 of each ring is its driver: it sends the token and waits for it
%% to come back, `rounds` times; members 1..size-1 forward whatever arrives.
%% The rings are built and passed around once before the clock starts; the
%% timed part is every ring's `rounds` trips at once. The VM's CPU split
%% (user/sys from /proc) covers the timed part only.
-module(pg_ring).
-export([main/1]).

main(Argv) ->
    pg_util:run(Argv, fun measure/1).

measure(Args) ->
    Rings = pg_util:int(<<"rings">>, Args),
    Size = pg_util:int(<<"size">>, Args),
    Rounds = pg_util:int(<<"rounds">>, Args),
    Size >= 2 orelse error({size, Size}),
    Parent = self(),
    S0 = pg_util:now_ns(),
    Drivers = [build(Parent, Size) || _ <- lists:seq(1, Rings)],
    pass(Drivers, 1),
    S1 = pg_util:now_ns(),
    Before = pg_util:usage(),
    T0 = pg_util:now_ns(),
    pass(Drivers, Rounds),
    T1 = pg_util:now_ns(),
    Used = pg_util:usage_delta(Before, pg_util:usage()),
    [D ! stop || D <- Drivers],
    maps:merge(Used#{seconds => pg_util:seconds(T0, T1), setup_s => pg_util:seconds(S0, S1),
                     messages => Rings * Size * Rounds, rings => Rings, size => Size,
                     rounds => Rounds},
               pg_util:vm_facts()).

%% One ring; returns its driver.
build(Parent, Size) ->
    spawn_link(fun() ->
                       First = lists:foldl(fun(_, Next) -> spawn_link(fun() -> member(Next) end) end,
                                           self(), lists:seq(1, Size - 1)),
                       driver(Parent, First)
               end).

driver(Parent, First) ->
    receive
        {go, Rounds} ->
            trips(First, Rounds),
            Parent ! {done, self()},
            driver(Parent, First);
        stop ->
            First ! stop
    end.

trips(_First, 0) -> ok;
trips(First, N) ->
    First ! token,
    receive token -> trips(First, N - 1) end.

member(Next) ->
    receive
        token -> Next ! token, member(Next);
        stop -> Next ! stop
    end.

pass(Drivers, Rounds) ->
    [D ! {go, Rounds} || D <- Drivers],
    [receive {done, D} -> ok end || D <- Drivers],
    ok.
