%% file_read (seed E2) in Erlang: read the test file in raw binary mode.
%%
%% mode=read: file:read/2 of block_size bytes until end of file, one fresh
%% binary per call; mode=whole: file:read_file/1 of the whole file; mode=pread:
%% `workers` processes, each with its own descriptor, file:pread/3-ing its own
%% contiguous share in block_size pieces, released together. Only the reading
%% is timed: opening the file and starting the readers happen before the clock.
-module(pg_file_read).
-export([main/1]).

-define(PAGE, 4096).

main(Argv) ->
    pg_util:run(Argv, fun measure/1).

measure(Args) ->
    Path = pg_util:str(<<"path">>, Args),
    Mode = pg_util:str(<<"mode">>, Args),
    Block = pg_util:int(<<"block_size">>, Args),
    Workers = pg_util:int(<<"workers">>, Args, 1),
    Size = filelib:file_size(Path),
    Before = pg_util:usage(),
    {Seconds, Bytes} = case Mode of
                           "read" -> read_loop(Path, Block);
                           "whole" -> whole(Path);
                           "pread" -> parallel(Path, Block, Workers, Size)
                       end,
    Used = pg_util:usage_delta(Before, pg_util:usage()),
    Bytes =:= Size orelse error({short_read, Bytes, Size}),
    maps:merge(Used#{seconds => Seconds, bytes => Bytes, file_size => Size,
                     mode => list_to_binary(Mode), block_size => Block, workers => Workers},
               pg_util:vm_facts()).

read_loop(Path, Block) ->
    {ok, Fd} = file:open(Path, [read, raw, binary]),
    T0 = pg_util:now_ns(),
    Bytes = read_all(Fd, Block, 0),
    T1 = pg_util:now_ns(),
    ok = file:close(Fd),
    {pg_util:seconds(T0, T1), Bytes}.

read_all(Fd, Block, Total) ->
    case file:read(Fd, Block) of
        {ok, Data} -> read_all(Fd, Block, Total + byte_size(Data));
        eof -> Total
    end.

whole(Path) ->
    T0 = pg_util:now_ns(),
    {ok, Data} = file:read_file(Path),
    T1 = pg_util:now_ns(),
    {pg_util:seconds(T0, T1), byte_size(Data)}.

%% Each worker's (offset, length): contiguous, page-aligned shares as the Python side cuts them.
shares(Size, Workers) ->
    Share0 = ceil_div(Size, Workers),
    Share = ceil_div(Share0, ?PAGE) * ?PAGE,
    [begin
         Start = min(I * Share, Size),
         {Start, min(Share, Size - Start)}
     end || I <- lists:seq(0, Workers - 1)].

ceil_div(A, B) -> (A + B - 1) div B.

parallel(Path, Block, Workers, Size) ->
    Parent = self(),
    Pids = [spawn_link(fun() -> reader(Parent, Path, Block, Share) end)
            || Share <- shares(Size, Workers)],
    [receive {ready, P} -> ok end || P <- Pids],
    T0 = pg_util:now_ns(),
    [P ! go || P <- Pids],
    Bytes = lists:sum([receive {done, P, N} -> N end || P <- Pids]),
    T1 = pg_util:now_ns(),
    {pg_util:seconds(T0, T1), Bytes}.

reader(Parent, Path, Block, {Offset, Length}) ->
    {ok, Fd} = file:open(Path, [read, raw, binary]),
    Parent ! {ready, self()},
    receive go -> ok end,
    N = pread_all(Fd, Block, Offset, Offset + Length, 0),
    Parent ! {done, self(), N},
    file:close(Fd).

pread_all(_Fd, _Block, Pos, End, Done) when Pos >= End -> Done;
pread_all(Fd, Block, Pos, End, Done) ->
    case file:pread(Fd, Pos, min(Block, End - Pos)) of
        {ok, Data} ->
            N = byte_size(Data),
            pread_all(Fd, Block, Pos + N, End, Done + N);
        eof -> Done
    end.
