%% spawn (seed E1) in Erlang: the serial chain of process spawns.
%%
%% `total` spawns split into `chains` chains that run at once: each process
%% spawns the next one of its chain and ends; the last one tells the parent.
%% A pass of a tenth of the spawns warms the VM up before the clock starts.
-module(pg_spawn).
-export([main/1]).

main(Argv) ->
    pg_util:run(Argv, fun measure/1).

measure(Args) ->
    Total = pg_util:int(<<"total">>, Args),
    Chains = pg_util:int(<<"chains">>, Args),
    (Chains >= 1 andalso Total >= Chains) orelse error({chains, Chains, Total}),
    run_chains(lengths(max(Chains, Total div 10), Chains)),
    Before = pg_util:usage(),
    T0 = pg_util:now_ns(),
    Spawns = run_chains(lengths(Total, Chains)),
    T1 = pg_util:now_ns(),
    Used = pg_util:usage_delta(Before, pg_util:usage()),
    Spawns =:= Total orelse error({spawned, Spawns, Total}),
    maps:merge(Used#{seconds => pg_util:seconds(T0, T1), spawns => Spawns, chains => Chains},
               pg_util:vm_facts()).

%% units per chain: Total split as evenly as possible
lengths(Total, Chains) ->
    [Total div Chains + case I < Total rem Chains of true -> 1; false -> 0 end
     || I <- lists:seq(0, Chains - 1)].

run_chains(Lengths) ->
    Parent = self(),
    [spawn(fun() -> unit(Parent, L, 1) end) || L <- Lengths],
    lists:sum([receive {done, N} -> N end || _ <- Lengths]).

unit(Parent, Left, Count) when Left > 1 ->
    spawn(fun() -> unit(Parent, Left - 1, Count + 1) end);
unit(Parent, _Left, Count) ->
    Parent ! {done, Count}.
