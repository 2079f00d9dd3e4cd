%% timers (seed E4) in Erlang: a storm of timers in Erlang processes.
%%
%% `tasks` processes each wait `rounds` times (receive ... after Ms), the
%% waits read from a file of little-endian uint32 milliseconds that the
%% Python side drew (one row per process, or one row for all: shared=1), so
%% the ideal wall time is the longest row's sum of the very waits slept. Each
%% wake-up's lateness (now - due) goes into a shared histogram (counters):
%% 10 us buckets below 10 ms, then 1 ms buckets. Timed: spawning the
%% processes and waiting for all of them; reading the file is not.
-module(pg_timers).
-export([main/1]).

-define(FINE, 1000).        % buckets of 10 us up to 10 ms
-define(COARSE, 120000).    % then buckets of 1 ms up to 120 s (the last: later)
-define(NB, (?FINE + ?COARSE + 1)).

main(Argv) ->
    pg_util:run(Argv, fun measure/1).

measure(Args) ->
    Tasks = pg_util:int(<<"tasks">>, Args),
    Rounds = pg_util:int(<<"rounds">>, Args),
    Shared = pg_util:int(<<"shared">>, Args) =:= 1,
    Progress = pg_util:int(<<"progress_ms">>, Args, 5000),
    {ok, Draws} = file:read_file(pg_util:str(<<"draws">>, Args)),
    Rows = case Shared of true -> 1; false -> Tasks end,
    byte_size(Draws) =:= Rows * Rounds * 4 orelse error({draws_size, byte_size(Draws)}),
    Ideal = lists:max([lists:sum(waits(row(Draws, R, Rounds))) || R <- lists:seq(0, Rows - 1)]),
    Hist = counters:new(?NB, [write_concurrency]),
    %% 1: events fired, 2: sum of lateness in us, 3: early wake-ups
    Tally = counters:new(3, [write_concurrency]),
    Max = atomics:new(1, [{signed, true}]),
    atomics:put(Max, 1, -1 bsl 62),
    Parent = self(),
    Before = pg_util:usage(),
    Run0 = element(1, erlang:statistics(runtime)),
    {Gcs0, _, _} = erlang:statistics(garbage_collection),
    T0 = pg_util:now_ns(),
    Pids = [spawn(fun() -> sleeper(Parent, waits(row(Draws, case Shared of
                                                                true -> 0;
                                                                false -> I
                                                            end, Rounds)),
                                   Hist, Tally, Max) end)
            || I <- lists:seq(0, Tasks - 1)],
    T1 = pg_util:now_ns(),
    wait_all(length(Pids), Tally, Tasks * Rounds, T0, Progress),
    T2 = pg_util:now_ns(),
    Run1 = element(1, erlang:statistics(runtime)),
    {Gcs1, _, _} = erlang:statistics(garbage_collection),
    Used = pg_util:usage_delta(Before, pg_util:usage()),
    Events = counters:get(Tally, 1),
    Events =:= Tasks * Rounds orelse error({fired, Events, Tasks * Rounds}),
    Wall = pg_util:seconds(T0, T2),
    P99 = pg_util:percentile(99, {Hist, ?NB}, fun upper_us/1) / 1000,
    maps:merge(Used#{seconds => Wall, spawn_s => pg_util:seconds(T0, T1),
                     ideal_s => Ideal / 1000, events => Events,
                     late_mean_ms => counters:get(Tally, 2) / Events / 1000,
                     late_p99_ms => P99,
                     late_max_ms => atomics:get(Max, 1) / 1000,
                     early => counters:get(Tally, 3),
                     cpu_s => (Run1 - Run0) / 1000, gc_collections => Gcs1 - Gcs0},
               pg_util:vm_facts()).

row(Draws, R, Rounds) -> binary:part(Draws, R * Rounds * 4, Rounds * 4).

waits(Bin) -> [Ms || <<Ms:32/little-unsigned>> <= Bin].

sleeper(Parent, Waits, Hist, Tally, Max) ->
    lists:foreach(fun(Ms) ->
                          Due = erlang:monotonic_time(microsecond) + Ms * 1000,
                          receive after Ms -> ok end,
                          Late = erlang:monotonic_time(microsecond) - Due,
                          counters:add(Hist, bucket(Late), 1),
                          counters:add(Tally, 1, 1),
                          counters:add(Tally, 2, Late),
                          Late < 0 andalso counters:add(Tally, 3, 1),
                          bump(Max, Late)
                  end, Waits),
    Parent ! done.

bump(Max, Late) ->
    Seen = atomics:get(Max, 1),
    case Late > Seen andalso atomics:compare_exchange(Max, 1, Seen, Late) =/= ok of
        true -> bump(Max, Late);
        false -> ok
    end.

bucket(Us) when Us < 0 -> 1;
bucket(Us) when Us < ?FINE * 10 -> 1 + Us div 10;
bucket(Us) -> min(?NB, ?FINE + 1 + (Us - ?FINE * 10) div 1000).

%% the upper bound (us) of bucket I
upper_us(I) when I =< ?FINE -> I * 10;
upper_us(I) -> ?FINE * 10 + (I - ?FINE) * 1000.

wait_all(0, _Tally, _Events, _T0, _Progress) -> ok;
wait_all(Left, Tally, Events, T0, Progress) ->
    receive
        done -> wait_all(Left - 1, Tally, Events, T0, Progress)
    after Progress ->
            io:format(standard_error, "timers (erlang): ~b/~b timer events after ~.1f s~n",
                      [counters:get(Tally, 1), Events,
                       pg_util:seconds(T0, pg_util:now_ns())]),
            wait_all(Left, Tally, Events, T0, Progress)
    end.
